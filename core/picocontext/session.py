"""ContextSession: run / append / apply over one caller-owned branch.

The session is synchronous and thread-safe: a busy guard makes ``run``, ``append`` and ``apply``
mutually exclusive (a second caller gets :class:`Busy`, never a lost update). Every mutation is
validated on a copy, saved if a store exists, and only then published.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from picocontext.backend import (
    EditStyle,
    ModelBackend,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    TokenCounter,
    ToolSpec,
    common_prefix,
    tools_json,
)
from picocontext.budget import RunBudget, Usage, check_prompt
from picocontext.cancel import CancelToken, check
from picocontext.choices import ChoiceRules
from picocontext.edits import (
    EDIT_TOOL,
    KEEP_TOOL,
    AppendTransaction,
    Edit,
    decode_edit_payload,
    decode_keep_payload,
)
from picocontext.errors import (
    BudgetExceeded,
    Busy,
    Cancelled,
    EditLimit,
    InvalidContext,
    ModelDidNotEdit,
    PicoContextError,
    StorageError,
)
from picocontext.incremental import DecisionMemory, DecisionSettings, IncrementalDecision
from picocontext.persistence import ContextStore
from picocontext.prompts import (
    accepted_detail,
    kept_detail,
    retry_feedback,
)

# FreshIds and reserved_ids are re-exported: policies that write receipts import them here.
from picocontext.receipts import FreshIds as FreshIds
from picocontext.receipts import Receipts
from picocontext.receipts import reserved_ids as reserved_ids
from picocontext.records import Record, Scope, Snapshot
from picocontext.report import Choice, EditAttempt, Outcome, RunMode, RunReport, ToolStep
from picocontext.working import WorkingContext, validate_snapshot


class _Commit(Exception):
    """Internal: a storage failure that must end the run without another attempt."""

    def __init__(self, error: PicoContextError) -> None:
        super().__init__(error.message)
        self.error = error


def _store_error(exc: Exception) -> StorageError:
    return exc if isinstance(exc, StorageError) else StorageError(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class ToolResult:
    """What a policy's tool executor returns: the text shown to the model and whether the
    call was valid."""

    ok: bool
    text: str


@dataclass(frozen=True)
class ToolLoop:
    """One turn of a tool-using policy: what the model sees and what it may call.

    ``view`` is the history the model is shown (a valid snapshot built by the policy from the
    working context, for example protected records plus a recent tail); ``preamble`` are
    runtime-owned protected records shown after it (for example a manifest index or a digest
    map). The model may make up to ``max_steps`` tool steps; a step without a tool call is its
    answer; after the last step one completion call without tools forces an answer.
    """

    mode: RunMode
    view: Snapshot
    preamble: tuple[Record, ...]
    tools: tuple[ToolSpec, ...]
    execute: Callable[[str, str], ToolResult]
    system_text: str
    guidance: str
    max_steps: int = 4
    # Trailing guidance of the forced answer after the last step (None: the completion text).
    final_guidance: str | None = None
    # What the policy's runtime already called for the model while building ``preamble``
    # (reported as the run's ``prefetch_steps``; their text is in the preamble).
    prefetched: tuple[ToolStep, ...] = ()


class ContextSession:
    """One session per caller-owned branch (scope)."""

    def __init__(
        self,
        context: Snapshot | WorkingContext,
        counter: TokenCounter,
        backend: ModelBackend,
        store: ContextStore | None = None,
    ) -> None:
        state = context if isinstance(context, WorkingContext) else WorkingContext.start(context)
        if isinstance(context, WorkingContext):
            validate_snapshot(state.original)
            validate_snapshot(state.snapshot)
        self._state = state
        self._counter = counter
        self._backend = backend
        self._store = store
        self._busy = threading.Lock()
        # The answer's JSON schema when the caller's task defines one (see ModelInput); set it
        # before a turn, and every answer-producing call of that turn carries it.
        self.answer_schema_json: str | None = None
        # What the incremental decision asked about, chose and restated, across turns.
        self._memory = DecisionMemory()
        if store is not None and store.load(state.snapshot.scope) is None:
            try:
                store.save(state)
            except Exception as exc:
                raise _store_error(exc) from exc

    @classmethod
    def open(
        cls,
        store: ContextStore,
        scope: Scope,
        counter: TokenCounter,
        backend: ModelBackend,
        initial: Snapshot | None = None,
    ) -> ContextSession:
        """Reopen ``scope`` from ``store`` exactly where it was, or start it from ``initial``."""
        loaded = store.load(scope)
        if loaded is not None:
            return cls(loaded, counter, backend, store)
        if initial is None:
            raise StorageError(f"No stored session for {scope} and no initial history given")
        if initial.scope != scope:
            raise InvalidContext("initial history belongs to another scope")
        return cls(initial, counter, backend, store)

    # -- views --------------------------------------------------------------------------
    @property
    def state(self) -> WorkingContext:
        return self._state

    @property
    def context(self) -> Snapshot:
        """The working snapshot the next call will see."""
        return self._state.snapshot

    @property
    def original_context(self) -> Snapshot:
        """The preserved transcript: every caller record with its original body."""
        return self._state.original

    @property
    def scope(self) -> Scope:
        return self._state.snapshot.scope

    @property
    def backend(self) -> ModelBackend:
        return self._backend

    @property
    def judged_ids(self) -> frozenset[str]:
        """Record ids the incremental decision has asked about (they are not asked again)."""
        return frozenset(self._memory.judged)

    @property
    def counter(self) -> TokenCounter:
        return self._counter

    def _acquire(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise Busy()

    def _publish(self, candidate: WorkingContext, cancel: CancelToken | None) -> None:
        check(cancel)
        if self._store is not None:
            try:
                self._store.save(candidate)
            except Exception as exc:
                raise _store_error(exc) from exc
        self._state = candidate

    # -- caller mutations ---------------------------------------------------------------
    def _mutate(
        self, change: Callable[[WorkingContext], WorkingContext], cancel: CancelToken | None
    ) -> Snapshot:
        """Validate on a copy, save, then publish — all under the busy guard."""
        self._acquire()
        try:
            candidate = change(self._state)
            self._publish(candidate, cancel)
            return candidate.snapshot
        finally:
            self._busy.release()

    def apply(self, edit: Edit, cancel: CancelToken | None = None) -> Snapshot:
        """A caller edit: same validation and persistence boundary as model edits."""
        return self._mutate(lambda state: state.apply(edit), cancel)

    def append(self, transaction: AppendTransaction, cancel: CancelToken | None = None) -> Snapshot:
        """Caller records extend both views together; no token budget is checked here."""
        return self._mutate(lambda state: state.append(transaction), cancel)

    def append_records(
        self, records: Iterable[Record], cancel: CancelToken | None = None
    ) -> Snapshot:
        """Append at the revision current *now* (convenience for single-writer callers)."""
        return self.append(
            AppendTransaction(
                scope=self.scope, base_revision=self.context.revision, records=tuple(records)
            ),
            cancel,
        )

    # -- the model loop -----------------------------------------------------------------
    def run(
        self,
        mode: RunMode = RunMode.EDITABLE,
        budget: RunBudget | None = None,
        edit_style: EditStyle = EditStyle.TARGETED,
        cancel: CancelToken | None = None,
        *,
        none_margin: float | None = None,
        apply_at: float = 0.0,
        choice_rules: ChoiceRules | None = None,
    ) -> RunReport:
        """One turn: optional bounded decision loop, then the completion. Failures other than
        cancellation become ``report.failure``; the run never appends the answer.
        ``none_margin`` (incremental choices): a picked option stands only when its log
        probability beats the reply ``none`` by more than this many nats (engines that report
        probabilities); ``None`` takes the greedy reply as it is. ``apply_at`` (incremental):
        chosen deletions wait until the answer prompt would fill more than this share of the
        window, then apply together, so the prefix cache survives the steps that do not need
        the room; 0 applies them at once. ``choice_rules`` (incremental): which earlier records a
        question offers and how its constrained reply is written (``None``: the defaults)."""
        self._acquire()
        try:
            settings = DecisionSettings(choice_rules or ChoiceRules(), apply_at, none_margin)
            run = _Run(self, mode, budget or RunBudget(), edit_style, cancel, settings)
            return run.execute()
        finally:
            self._busy.release()

    def run_tools(
        self,
        build: Callable[[WorkingContext], ToolLoop],
        budget: RunBudget | None = None,
        policy: str = "",
        cancel: CancelToken | None = None,
    ) -> RunReport:
        """One turn of a tool-using policy. ``build`` gets the state under the busy guard and
        returns the turn's :class:`ToolLoop`; budgets, accounting, receipts, cancellation and
        the report work exactly as in :meth:`run`. The working context is never changed."""
        self._acquire()
        try:
            run = _Run(self, RunMode.NAVIGATED, budget or RunBudget(), EditStyle.TARGETED, cancel)
            return run.execute(tools=build, policy=policy)
        finally:
            self._busy.release()

    def run_view(
        self,
        build: Callable[[WorkingContext], Snapshot],
        budget: RunBudget | None = None,
        policy: str = "",
        cancel: CancelToken | None = None,
    ) -> RunReport:
        """One completion over a view the policy builds from the working state (for example
        the newest records that fit, or retrieved records). The view must be a valid snapshot;
        budgets, accounting and the report work as in :meth:`run`; the working context is
        never changed, so the report's ``final_prompt`` is exactly what the model read."""
        self._acquire()
        try:
            run = _Run(self, RunMode.APPEND_ONLY, budget or RunBudget(), EditStyle.TARGETED, cancel)
            return run.execute(view=build, policy=policy)
        finally:
            self._busy.release()


class _Run:
    """State of one ``ContextSession.run`` call."""

    def __init__(
        self,
        session: ContextSession,
        mode: RunMode,
        budget: RunBudget,
        edit_style: EditStyle,
        cancel: CancelToken | None,
        settings: DecisionSettings | None = None,
    ) -> None:
        self.s = session
        self.mode = mode
        self.budget = budget
        self.style = edit_style
        self.cancel = cancel
        self.usage = Usage()
        self.calls: list[PreparedPrompt] = []
        self.attempts: list[EditAttempt] = []
        self.answer = ""
        self.final_prompt: PreparedPrompt | None = None
        self.edit_calls = 0
        self.keep_calls = 0
        self.tool_steps: list[ToolStep] = []
        self.prefetch_steps: tuple[ToolStep, ...] = ()
        self.choices: list[Choice] = []
        self.call_prefill: list[int] = []
        # What the accepted edit bought and cost: window tokens its answer prompt saved, and
        # prompt tokens the answer call must prefill beyond what a keep would have (the cache
        # is valid only up to the first changed record).
        self.edit_saved_tokens = 0
        self.edit_prefill_cost = 0
        # The edited answer prompt, what a keep's answer would have prefilled, and the cost
        # estimated from the tokens: replaced by the engine's own count once it answers.
        self._edit_estimate: tuple[PreparedPrompt, int, int] | None = None
        self.settings = settings or DecisionSettings()
        # One prefix per step: every call of this run renders the same system text and tool
        # specs before the history; the phase, the revision and the question trail after it.
        # The tool-call protocol shows its tools (without the per-revision id enum, which the
        # grammar enforces) in the answer call too, where the runtime refuses any call.
        self.tool_call_step = mode is RunMode.EDITABLE and edit_style is not EditStyle.INCREMENTAL

    def prepare(
        self,
        snapshot: Snapshot,
        phase: Phase,
        control: tuple[Record, ...] = (),
        *,
        guidance: str | None = None,
        answer_schema_json: str | None = None,
    ) -> PreparedPrompt:
        schema = answer_schema_json if phase is Phase.CHOICE else self._answer_schema(phase)
        return self.s._counter.prepare(
            ModelInput(
                context=snapshot,
                phase=phase,
                control_records=control,
                edit_style=self.style,
                tool_call_step=self.tool_call_step,
                guidance=guidance,
                answer_schema_json=schema,
            )
        )

    def _answer_schema(self, phase: Phase) -> str | None:
        return None if phase is Phase.EDIT else self.s.answer_schema_json

    def dispatch(self, prompt: PreparedPrompt, cap: int) -> ModelResponse:
        self.calls.append(prompt)
        self.usage.input_tokens += prompt.token_count
        response = self.s._backend.generate(prompt, cap, self.cancel)
        check(self.cancel)
        if not 0 <= response.generated_tokens <= cap:
            raise InvalidContext("backend reported invalid token usage")
        self.usage.generated_tokens += response.generated_tokens
        prefill = prompt.token_count if response.prefill_tokens is None else response.prefill_tokens
        self.usage.prefill_tokens += prefill
        self.call_prefill.append(prefill)
        return response

    def execute(
        self,
        tools: Callable[[WorkingContext], ToolLoop] | None = None,
        policy: str = "",
        view: Callable[[WorkingContext], Snapshot] | None = None,
    ) -> RunReport:
        started = time.perf_counter()
        original = self.s._state.original
        run_start = self.s._state.snapshot
        original_tokens: int | None = None
        original_failure: str | None = None
        run_start_tokens = 0
        failure: str | None = None
        try:
            self.budget.validate_ranges()
            run_start_tokens = self.prepare(run_start, Phase.COMPLETION).token_count
            if original == run_start:
                original_tokens = run_start_tokens
            else:
                try:
                    original_tokens = self.prepare(original, Phase.COMPLETION).token_count
                except Cancelled:
                    raise
                except PicoContextError as exc:
                    original_failure = exc.message
            if tools is not None:
                loop = tools(self.s._state)
                self.mode = loop.mode
                self.tool_loop(loop)
            elif view is not None:
                shown = view(self.s._state)
                validate_snapshot(shown)
                prompt = self.prepare(shown, Phase.COMPLETION)
                cap = self.budget.completion_output_tokens
                check_prompt(self.budget, self.usage, prompt.token_count, cap, cancel=self.cancel)
                self.final_prompt = prompt
                self.complete()
            else:
                if self.mode is RunMode.EDITABLE:
                    self.decide()
                self.complete()
        except Cancelled:
            raise
        except _Commit as exc:
            failure = exc.error.message
        except PicoContextError as exc:
            failure = exc.message
        return RunReport(
            mode=self.mode,
            edit_style=self.style,
            original=self.s._state.original,
            run_start=run_start,
            revised=self.s._state.snapshot,
            original_prompt_tokens=original_tokens,
            original_prompt_failure=original_failure,
            run_start_prompt_tokens=run_start_tokens,
            final_prompt=self.final_prompt,
            calls=tuple(self.calls),
            attempts=tuple(self.attempts),
            answer=self.answer,
            failure=failure,
            total_input_tokens=self.usage.input_tokens,
            total_generated_tokens=self.usage.generated_tokens,
            total_prefill_tokens=self.usage.prefill_tokens,
            edit_call_count=self.edit_calls,
            keep_call_count=self.keep_calls,
            elapsed_seconds=time.perf_counter() - started,
            policy=policy or self.mode.value,
            tool_steps=tuple(self.tool_steps),
            prefetch_steps=self.prefetch_steps,
            choices=tuple(self.choices),
            call_prefill_tokens=tuple(self.call_prefill),
            edit_window_saved_tokens=self.edit_saved_tokens,
            edit_prefill_cost_tokens=self.edit_prefill_cost,
        )

    # -- one model call ---------------------------------------------------------------------
    def step(self, prompt: PreparedPrompt) -> ModelResponse:
        """Check ``prompt`` against the budget (keeping the answer's allowance in reserve),
        then dispatch it with the decision/tool-step output cap."""
        budget = self.budget
        check_prompt(
            budget,
            self.usage,
            prompt.token_count,
            budget.edit_output_tokens,
            reserve=budget.completion_output_tokens,
            cancel=self.cancel,
        )
        return self.dispatch(prompt, budget.edit_output_tokens)

    @property
    def state(self) -> WorkingContext:
        """The session's working context now (an accepted edit replaces it)."""
        return self.s._state

    def receipts(self, current: WorkingContext, control: tuple[Record, ...]) -> Receipts:
        return Receipts(
            FreshIds(reserved_ids(current.original.records, current.snapshot.records, control))
        )

    # -- decision loop ------------------------------------------------------------------
    def decide(self) -> None:
        if self.style is EditStyle.INCREMENTAL:
            IncrementalDecision(self, self.s._memory, self.settings).decide()
            return
        control: tuple[Record, ...] = ()
        for attempt in range(self.budget.max_edit_attempts):
            check(self.cancel)
            current = self.s._state
            response = self.step(self.prepare(current.snapshot, Phase.EDIT, control))
            arguments = "\n".join(c.arguments for c in response.tool_calls)
            try:
                candidate, outcome, detail = self.judge(response, current)
                receipt = self.receipts(current, control).decision(
                    attempt, response.tool_calls, detail
                )
                completion = self.prepare(candidate.snapshot, Phase.COMPLETION, receipt)
                check_prompt(
                    self.budget,
                    self.usage,
                    completion.token_count,
                    self.budget.completion_output_tokens,
                    cancel=self.cancel,
                )
            except Cancelled:
                raise
            except PicoContextError as exc:
                self.attempt(response, arguments, Outcome.REJECTED, exc.message)
                receipts = self.receipts(current, control)
                control = (receipts.feedback(attempt, retry_feedback(current.revision)),)
                continue
            check(self.cancel)
            if outcome is Outcome.EDITED:
                self.commit(candidate, response, arguments)
                self.attribute(current.snapshot, completion)
            self.final_prompt = completion
            self.attempt(response, arguments, outcome, detail)
            return
        raise EditLimit()

    def attempt(
        self, response: ModelResponse, arguments: str, outcome: Outcome, detail: str
    ) -> None:
        self.attempts.append(
            EditAttempt(
                arguments=arguments, model_text=response.text, outcome=outcome, detail=detail
            )
        )

    def attribute(
        self, before: Snapshot, after: PreparedPrompt, keep: tuple[Record, ...] | None = None
    ) -> None:
        """Charge the accepted edit: the window it frees (the unedited history against the
        edited one, under the same receipt: what every later prompt is spared) and the prefill
        it adds, counted against the last call's tokens (what the cache holds) as the answer
        prompt's unshared tail minus the tail of the answer a keep would have sent. ``keep``
        is the control records that keep answers with (``None``: a receipt like the edit's,
        as after a model's ``keep_context`` call; the incremental decision's keep has none, so
        there the edit's receipt is part of its prefill cost). When the answer call runs and
        its engine reports what it computed, that count replaces the estimate
        (:meth:`complete`): an engine that moves its cache (llama.cpp's KV shift) recomputes
        far less than the unshared tail."""
        unedited = self.prepare(before, Phase.COMPLETION, after.input.control_records)
        self.edit_saved_tokens += unedited.token_count - after.token_count
        kept = unedited if keep is None else self.prepare(before, Phase.COMPLETION, keep)
        cached = self.calls[-1].token_ids if self.calls else ()
        tail_after = after.token_count - common_prefix(after.token_ids, cached)
        tail_kept = kept.token_count - common_prefix(kept.token_ids, cached)
        estimate = max(tail_after - tail_kept, 0)
        self.edit_prefill_cost += estimate
        self._edit_estimate = (after, tail_kept, estimate)

    def measured_edit_cost(self, prompt: PreparedPrompt, response: ModelResponse) -> None:
        """The edit's prefill cost from the engine's count of the answer call, in place of
        the token estimate, when the engine reports one for the edited answer prompt and
        computed less than a prefix cache must (it moved cached tokens). Never more than the
        estimate: an engine that computed more (its cache off or cold) would have computed
        more for a keep as well."""
        estimated, self._edit_estimate = self._edit_estimate, None
        if estimated is None or estimated[0] is not prompt or response.prefill_tokens is None:
            return
        _after, tail_kept, estimate = estimated
        measured = max(response.prefill_tokens - tail_kept, 0)
        self.edit_prefill_cost += min(measured, estimate) - estimate

    def commit(self, candidate: WorkingContext, response: ModelResponse, arguments: str) -> None:
        try:
            self.s._publish(candidate, self.cancel)
        except StorageError as exc:
            self.attempt(response, arguments, Outcome.REJECTED, f"Commit failed: {exc.message}")
            raise _Commit(exc) from exc

    def judge(
        self, response: ModelResponse, current: WorkingContext
    ) -> tuple[WorkingContext, Outcome, str]:
        if response.reached_token_limit:
            raise BudgetExceeded("edit generation hit its output limit")
        if not response.tool_calls:
            raise ModelDidNotEdit()
        if len(response.tool_calls) > 1:
            raise InvalidContext("one context decision call is allowed per attempt")
        call = response.tool_calls[0]
        if call.name == EDIT_TOOL:
            self.edit_calls += 1
            candidate = current.apply(decode_edit_payload(call.arguments, current.snapshot.scope))
            return candidate, Outcome.EDITED, accepted_detail(candidate.revision)
        if call.name == KEEP_TOOL:
            self.keep_calls += 1
            decode_keep_payload(call.arguments, current.revision)
            return current, Outcome.KEPT, kept_detail(current.revision)
        raise InvalidContext("unknown context tool")

    # -- completion ---------------------------------------------------------------------
    def complete(self) -> None:
        check(self.cancel)
        prompt = self.final_prompt or self.prepare(self.s._state.snapshot, Phase.COMPLETION)
        cap = self.budget.completion_output_tokens
        check_prompt(self.budget, self.usage, prompt.token_count, cap, cancel=self.cancel)
        self.final_prompt = prompt
        response = self.dispatch(prompt, cap)
        self.measured_edit_cost(prompt, response)
        self.answer = response.text
        if response.tool_calls:
            raise InvalidContext("tools are disabled during completion")
        if response.reached_token_limit:
            raise BudgetExceeded("completion hit its output limit")

    # -- tool-using policies --------------------------------------------------------------
    def tool_loop(self, loop: ToolLoop) -> None:
        """Bounded tool steps over ``loop.view``; the exchange accumulates as protected
        control records (runtime ids never collide with caller ids).

        A policy's executor keeps room for a short refusal on every call still to come, but
        it cannot bound what the model writes into a call (a free-decoded ``look`` at sixteen
        ids is a hundred tokens). So the window decides here as well: when another tool step
        no longer fits, the model answers with what it has read; and when the forced answer
        would not fit, the newest exchanges that were only refusals (they told the model
        nothing) are left out of its prompt until it does. The report keeps every step."""
        validate_snapshot(loop.view)
        if not 1 <= loop.max_steps <= 16:
            raise InvalidContext("a tool policy allows 1...16 steps")
        current = self.s._state
        self.prefetch_steps = loop.prefetched
        exchanges: list[Exchange] = []
        spec_json = tools_json(loop.tools)
        allowed = {t.name for t in loop.tools}
        budget = self.budget
        for step in range(loop.max_steps):
            check(self.cancel)
            model_input = ModelInput(
                context=loop.view,
                phase=Phase.TOOLS,
                control_records=shown(loop.preamble, exchanges),
                tools_json=spec_json,
                system_text=loop.system_text,
                guidance=loop.guidance,
                answer_schema_json=self._answer_schema(Phase.TOOLS),
            )
            prompt = self.s._counter.prepare(model_input)
            if exchanges and not budget.fits(prompt.token_count, budget.edit_output_tokens):
                break  # no room for another step: answer with what was read
            response = self.step(prompt)
            if response.reached_token_limit:
                raise BudgetExceeded("tool step hit its output limit")
            if not response.tool_calls:
                # No call: this is the answer (tools were offered, not required).
                self.final_prompt = prompt
                self.answer = response.text
                return
            outcomes = [
                self.run_tool(loop, allowed, step, call, response) for call in response.tool_calls
            ]
            # An unknown name is model text: it is never echoed into the next prompt.
            calls = tuple(
                ModelToolCall(
                    name=call.name if call.name in allowed else "unknown_tool",
                    arguments=object_text(call.arguments),
                )
                for call in response.tool_calls
            )
            receipts = self.receipts(current, shown(loop.preamble, exchanges))
            records = receipts.tools(step, calls, [o.text for o in outcomes])
            exchanges.append(Exchange(records, informative=any(o.ok for o in outcomes)))
        check(self.cancel)

        def final(kept: list[Exchange]) -> PreparedPrompt:
            return self.s._counter.prepare(
                ModelInput(
                    context=loop.view,
                    phase=Phase.COMPLETION,
                    control_records=shown(loop.preamble, kept),
                    system_text=loop.system_text,
                    guidance=loop.final_guidance,
                    answer_schema_json=self._answer_schema(Phase.COMPLETION),
                )
            )

        prompt = final(exchanges)
        cap = budget.completion_output_tokens
        while not budget.fits(prompt.token_count, cap) and any(
            not e.informative for e in exchanges
        ):
            last = max(i for i, e in enumerate(exchanges) if not e.informative)
            exchanges = exchanges[:last] + exchanges[last + 1 :]
            prompt = final(exchanges)
        self.final_prompt = prompt
        self.complete()

    def run_tool(
        self,
        loop: ToolLoop,
        allowed: set[str],
        step: int,
        call: ModelToolCall,
        response: ModelResponse,
    ) -> ToolResult:
        """Execute one call (an unknown name is refused) and record it as a tool step."""
        if call.name in allowed:
            outcome = loop.execute(call.name, call.arguments)
        else:
            outcome = ToolResult(
                ok=False, text=f"Unknown tool. Available tools: {', '.join(sorted(allowed))}."
            )
        self.tool_steps.append(
            ToolStep(
                step=step,
                name=call.name,
                arguments=call.arguments,
                ok=outcome.ok,
                result=outcome.text,
                model_text=response.text,
            )
        )
        return outcome


@dataclass(frozen=True, slots=True)
class Exchange:
    """One tool step's receipt records, and whether any of its calls got a result (a step
    of refusals only told the model nothing, so a full window may leave it out)."""

    records: tuple[Record, ...]
    informative: bool


def shown(preamble: tuple[Record, ...], exchanges: Sequence[Exchange]) -> tuple[Record, ...]:
    """The control records a tool-loop prompt carries: the preamble, then each exchange."""
    return (*preamble, *(r for e in exchanges for r in e.records))


def object_text(arguments: str) -> str:
    """Echo the model's arguments in the receipt only when they are a JSON object (chat
    templates cannot render anything else); otherwise an empty object stands in. The raw text
    stays in the report's tool steps."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments if isinstance(value, dict) else "{}"
