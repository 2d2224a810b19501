#!/usr/bin/env python3
"""Reference renderings of the Qwen2.5 chat template, for tests/data/formats_test.cc.

Renders a few conversations with the template of Qwen2.5-Instruct's tokenizer_config.json
(copied below verbatim), through jinja2 set up as Hugging Face transformers does for
apply_chat_template (sandboxed, trim_blocks, lstrip_blocks, and transformers' own tojson filter:
json.dumps(x, ensure_ascii=False), keys in their order, no HTML escaping), and writes one JSON
object per line: {"messages": [...], "tools": [...] (when given), "add_generation_prompt": bool,
"rendered": "..."}.

The cases with tools cover tools in the system prompt (with and without a system message),
assistant tool calls (OpenAI's {"type", "id", "function"} form and the bare {"name", "arguments"}
form), parallel calls, consecutive tool results, arguments given as a JSON string and content
given as a list of text parts. kiln reads the last two as transformers users mean them, which the
template itself does not: a string of arguments is parsed and rendered as its object, and text
parts are joined. The reference renders the same normalised messages, while the fixture keeps
the messages as given, so the test feeds kiln the original form.

Made with:  python3 tools/qwen25_chat_template_ref.py > tests/fixtures/data/chat_template_ref.jsonl
(jinja2 3.1.2, Debian bookworm's python3-jinja2, run with /usr/bin/python3). Never needed by the
build.

With --template it writes the template itself instead (no jinja2 needed), which kiln embeds for
model directories whose base has no chat template:
  python3 tools/qwen25_chat_template_ref.py --template > tests/fixtures/data/qwen25_chat_template.jinja
"""
import copy
import json
import sys

# Qwen/Qwen2.5-*-Instruct tokenizer_config.json, "chat_template".
TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "The capital of France is Paris."}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "What is 3 + 4?"},
     {"role": "assistant", "content": "3 + 4 = 7."}],
    [{"role": "system", "content": "You answer in one line."},
     {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello. How can I help?"},
     {"role": "user", "content": "Spell 'cat' backwards.\nThanks."},
     {"role": "assistant", "content": "tac"},
     {"role": "system", "content": "A later system note."},
     {"role": "user", "content": "Caf\u00e9, \u00fcber, \u4f60\u597d \U0001F44D"},
     {"role": "assistant", "content": "\n  Indented reply with a leading line break."}],
    [{"role": "user", "content": ""},
     {"role": "assistant", "content": ""}],
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a zone <IANA> & \"quoted\", e.g. Z\u00fcrich.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}

# (messages, tools)
TOOL_CASES = [
    # tools without a system message; OpenAI's tool-call form
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"type": "function", "id": "call_1",
           "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
      {"role": "assistant", "content": "It is 18 \u00b0C and clear in Paris."}],
     [WEATHER]),
    # system plus tools; an assistant turn with content and a call
    ([{"role": "system", "content": "You are a weather bot."},
      {"role": "user", "content": "And in Oslo?"},
      {"role": "assistant", "content": "Let me check.", "tool_calls": [
          {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
      {"role": "tool", "name": "get_weather", "content": "rain, 9 C"},
      {"role": "assistant", "content": "Rainy, 9 C."}],
     [WEATHER, TIME]),
    # parallel calls (bare form), consecutive tool results grouped into one user turn
    ([{"role": "user", "content": "Weather in Rome and the time in Tokyo?"},
      {"role": "assistant", "tool_calls": [
          {"name": "get_weather", "arguments": {"city": "Rome"}},
          {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}]},
      {"role": "tool", "content": "sunny, 25 C"},
      {"role": "tool", "content": "21:04"},
      {"role": "assistant", "content": "Sunny and 25 C in Rome; 21:04 in Tokyo."}],
     [WEATHER, TIME]),
    # arguments as a JSON string (kiln parses it), non-ASCII and nested values
    ([{"role": "user", "content": "Z\u00fcrich?"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"type": "function", "function": {"name": "get_weather",
                                            "arguments": "{\"city\": \"Z\u00fcrich\", \"unit\": \"celsius\"}"}}]},
      {"role": "tool", "content": "snow"},
      {"role": "assistant", "content": "Snow."}],
     [WEATHER]),
    # argument values of every JSON type, keys in their given (unsorted) order
    ([{"role": "user", "content": "Find caf\u00e9s."},
      {"role": "assistant", "content": "", "tool_calls": [
          {"function": {"name": "search", "arguments": {
              "query": "caf\u00e9 \"best\" <b>&amp;</b>\n", "limit": 5, "zeta": -1.5e-07,
              "filters": {"open": True, "rating": 4.5, "tags": ["a", "b"], "near": None},
              "alpha": [], "big": 12345678901234, "obj": {}}}}]},
      {"role": "tool", "content": "[]"},
      {"role": "assistant", "content": "None found."}],
     [{"type": "function", "function": {"name": "search", "parameters": {}}}]),
    # content as a list of text parts
    ([{"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
      {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
      {"role": "assistant", "content": [{"type": "text", "text": "Both read."}]}],
     None),
    # tool turns without a tools list; a later system message
    ([{"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]},
      {"role": "tool", "content": "r"},
      {"role": "system", "content": "note"},
      {"role": "assistant", "content": "a"}],
     None),
    # the conversation ends with tool results (the generation prompt follows them)
    ([{"role": "system", "content": "S"},
      {"role": "user", "content": "u"},
      {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {}}]},
      {"role": "tool", "content": "one"},
      {"role": "tool", "content": "two"}],
     [TIME]),
    # a tool call followed directly by a plain answer and a second call round
    ([{"role": "user", "content": "plan"},
      {"role": "assistant", "content": "", "tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}]},
      {"role": "tool", "content": "12:00"},
      {"role": "assistant", "content": "Noon. Checking weather too.", "tool_calls": [
          {"name": "get_weather", "arguments": {"city": "Lima"}}]},
      {"role": "tool", "content": "fog"},
      {"role": "assistant", "content": "Noon and foggy in Lima."}],
     [TIME, WEATHER]),
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' chat-template tojson (utils/chat_template_utils.py)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def normalised(messages):
    """The messages as kiln reads them: text parts joined, string arguments parsed."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p["text"] for p in m["content"])
        for c in m.get("tool_calls") or []:
            f = c.get("function", c)
            if isinstance(f.get("arguments"), str):
                f["arguments"] = json.loads(f["arguments"])
    return out


def main():
    if sys.argv[1:] == ["--template"]:
        sys.stdout.write(TEMPLATE)
        return
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    template = env.from_string(TEMPLATE)
    cases = [(m, None) for m in CONVERSATIONS] + TOOL_CASES
    for messages, tools in cases:
        for gen in (False, True):
            rendered = template.render(messages=normalised(messages), tools=tools,
                                       add_generation_prompt=gen)
            line = {"messages": messages}
            if tools is not None:
                line["tools"] = tools
            line.update({"add_generation_prompt": gen, "rendered": rendered})
            sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")

if __name__ == "__main__":
    main()
