"""Our own reviewed chat templates for the embedded models.

A GGUF file carries a Jinja chat template, but the embedded models come from uploaders we do
not know, and a template is code that runs on every prompt. So the converter never copies the
file's template: each embedded-model spec names one of the templates below, written and
reviewed here, and tests check that each renders the wire format its model was trained on.

* :data:`QWEN25_TEMPLATE` — Qwen2.5 (Coder) Instruct: ChatML turns; with tools, the system turn
  gets a ``# Tools`` section listing one JSON signature per line inside ``<tools></tools>`` and
  the ``<tool_call>`` reply format; assistant calls are ``<tool_call>`` JSON objects; tool
  results are grouped into one user turn of ``<tool_response>`` blocks. Differences from the
  template Qwen publishes: the instruction sentences are our own words, tool-call arguments that
  are already a JSON string are written as they are (the published one would encode them a
  second time), and a role the format has no turn for is an error instead of being dropped.
* :data:`SMOLLM2_TEMPLATE` — SmolLM2 Instruct: plain ChatML, no tool support (the adapter in
  :mod:`picocontext.models.chatformat` renders the tool protocol itself and says so).
"""

from __future__ import annotations

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# The strings the Qwen2.5 wire format is made of; tests check each appears where expected.
QWEN25_TOOLS_HEADER = "# Tools"
QWEN25_CALL_EXAMPLE = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'

_QWEN25_TOOLS_INTRO = (
    "You can call one or more of the functions below to help with the request.\\n\\n"
    "Their signatures are listed inside <tools></tools> XML tags:\\n<tools>"
)
_QWEN25_TOOLS_OUTRO = (
    "\\n</tools>\\n\\nFor each function call, reply with a JSON object holding the function "
    "name and its arguments inside <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>'
)

QWEN25_TEMPLATE = (
    r"""
{%- if messages and messages[0].role == 'system' %}
{%- set system_text = messages[0].content %}
{%- set turns = messages[1:] %}
{%- else %}
{%- set system_text = '"""
    + QWEN25_DEFAULT_SYSTEM
    + r"""' %}
{%- set turns = messages %}
{%- endif %}
{{- '<|im_start|>system\n' + system_text }}
{%- if tools %}
{{- '\n\n"""
    + QWEN25_TOOLS_HEADER
    + r"""\n\n"""
    + _QWEN25_TOOLS_INTRO
    + r"""' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '"""
    + _QWEN25_TOOLS_OUTRO
    + r"""' }}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- for message in turns %}
{%- if message.role == 'user' or message.role == 'system' %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- if not message.tool_calls and not message.content %}{{- '\n' }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": ' + (call.name | tojson) + ', "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}
{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or turns[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or turns[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- else %}
{{- raise_exception('the Qwen2.5 chat format has no ' + message.role + ' turn') }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""
).strip()

SMOLLM2_TEMPLATE = (
    r"""
{%- if not messages or messages[0].role != 'system' %}
{{- '<|im_start|>system\n"""
    + SMOLLM2_DEFAULT_SYSTEM
    + r"""<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role in ['system', 'user', 'assistant'] %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
{%- else %}
{{- raise_exception('the SmolLM2 chat format has no ' + message.role + ' turn') }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""
).strip()

TEMPLATES: dict[str, str] = {"qwen2.5": QWEN25_TEMPLATE, "smollm2": SMOLLM2_TEMPLATE}
