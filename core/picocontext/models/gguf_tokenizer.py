"""A Hugging Face ``tokenizer.json`` rebuilt from a GGUF vocabulary.

``tokenizers`` builds it from the file's vocabulary, merges and token types, with the
pre-tokenizer the file names (the same split regexes as llama.cpp's table); control tokens are
special, user-defined ones (such as ``<tool_call>``) are added tokens. :func:`check_tokenizer`
refuses a result that does not round-trip a set of texts or splits a special token.
"""

from __future__ import annotations

from typing import Any

from picocontext.models.gguf_reader import GGUFSource

# Pre-tokenizer split regexes by ``tokenizer.ggml.pre`` (the same facts as llama.cpp's table).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2 differs from Llama 3 in one place: every digit is its own piece.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGITS_THEN_GPT2 = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_PLAIN_GPT2 = ("gpt2", "default", "gpt-2", "mpt", "olmo", "jais")
_LLAMA3_LIKE = ("llama3", "llama-bpe", "smaug-bpe", "dbrx")

# GGUF token types.
_CONTROL, _USER_DEFINED = 3, 4
# Always special in ChatML-family vocabularies, whatever type the file gives them.
_CHATML_SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

_ROUND_TRIP_SAMPLES = (
    "plain ascii text, with punctuation!",
    "Grüße aus Zürich — naïve café, «quotes» 東京 서울 Ωμέγα 🙂👍🏽",
    "tabs\tand\nnewlines\n\n  indented   spaces",
    "digits 0123456789 and 3.14159, ids LM-204 and TQ-4819-X",
    'code: def f(x):\n    return {"key": [1, 2]}  # ok',
)


def _pre_tokenizer(pre: str, source: GGUFSource) -> tuple[Any, Any]:
    """(normalizer or None, pre-tokenizer) for a ``tokenizer.ggml.pre`` name."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in _DIGITS_THEN_GPT2:
        digits = pre_tokenizers.Digits(individual_digits=True)
        gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        return None, pre_tokenizers.Sequence([digits, gpt2])
    if pre in _PLAIN_GPT2:
        return None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    split = {"qwen2": _QWEN2_SPLIT, **dict.fromkeys(_LLAMA3_LIKE, _LLAMA3_SPLIT)}.get(pre)
    if split is None:
        raise source.fail(f"unsupported GGUF pre-tokenizer {pre!r}")
    splitter = pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False)
    normalizer = normalizers.NFC() if pre == "qwen2" else None
    return normalizer, pre_tokenizers.Sequence([splitter, byte_level])


def _token_types(source: GGUFSource, count: int) -> list[int]:
    types = [int(t) for t in source.meta.get("tokenizer.ggml.token_type", [])]
    return types if len(types) == count else [1] * count


def build_tokenizer(source: GGUFSource) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` rebuilt from the GGUF vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    if source.scalar("tokenizer.ggml.model") != "gpt2":
        raise source.fail(
            "only byte-level BPE (tokenizer.ggml.model = gpt2) GGUF vocabularies are supported"
        )
    tokens: list[str] = list(source.scalar("tokenizer.ggml.tokens"))
    merges = [tuple(m.split(" ", 1)) for m in source.meta.get("tokenizer.ggml.merges", [])]
    vocab = {token: i for i, token in enumerate(tokens)}
    try:
        bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    except Exception as exc:  # tokenizers raises a bare Exception for inconsistent merges
        raise source.fail(f"the GGUF vocabulary and merges do not fit together ({exc})") from exc
    tokenizer = Tokenizer(bpe)
    normalizer, pre = _pre_tokenizer(str(source.scalar("tokenizer.ggml.pre", "default")), source)
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    types = _token_types(source, len(tokens))
    special = [t for i, t in enumerate(tokens) if types[i] == _CONTROL or t in _CHATML_SPECIAL]
    added = [t for i, t in enumerate(tokens) if types[i] == _USER_DEFINED and t not in special]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    for text in (*special, *added):
        if tokenizer.token_to_id(text) != vocab[text]:
            raise source.fail(f"the added token {text!r} did not keep its vocabulary id")
    return tokenizer


def build_tokenizer_json(source: GGUFSource) -> str:
    return str(build_tokenizer(source).to_str())


def check_tokenizer(tokenizer: Any, source: GGUFSource, required: tuple[str, ...] = ()) -> None:
    """Refuse a tokenizer that does not round-trip text or would split a special token."""
    for text in _ROUND_TRIP_SAMPLES:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        back = tokenizer.decode(ids, skip_special_tokens=False)
        if back != text:
            raise source.fail(
                f"the rebuilt tokenizer does not round-trip text ({text[:24]!r}… came back as "
                f"{back[:24]!r}…); refusing to import it"
            )
    for token in required:
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise source.fail(f"the chat format needs {token!r}, which is not in the vocabulary")
        if tokenizer.encode(token, add_special_tokens=False).ids != [token_id]:
            raise source.fail(f"the rebuilt tokenizer splits {token!r}; refusing to import it")


def _special_token(source: GGUFSource, key: str) -> str | None:
    if key not in source.meta:
        return None
    index = int(source.meta[key])
    tokens = source.scalar("tokenizer.ggml.tokens")
    if not 0 <= index < len(tokens):
        raise source.fail(f"{key} = {index} is outside the {len(tokens)}-token vocabulary")
    return str(tokens[index])


def tokenizer_config(source: GGUFSource, chat_template: str, max_length: int) -> dict[str, Any]:
    eos = _special_token(source, "tokenizer.ggml.eos_token_id")
    if eos is None:
        raise source.fail("the GGUF metadata names no end-of-sequence token")
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "bos_token": _special_token(source, "tokenizer.ggml.bos_token_id"),
        "eos_token": eos,
        "pad_token": _special_token(source, "tokenizer.ggml.padding_token_id"),
        "unk_token": _special_token(source, "tokenizer.ggml.unknown_token_id"),
        "add_bos_token": bool(source.meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    }


def stop_ids(source: GGUFSource, tokenizer: Any) -> list[int]:
    """The end-of-turn id, plus ``<|endoftext|>`` where the vocabulary has both."""
    ids = [int(source.scalar("tokenizer.ggml.eos_token_id"))]
    end = tokenizer.token_to_id("<|endoftext|>")
    return ids + ([end] if end is not None and end not in ids else [])
