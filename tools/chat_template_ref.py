#!/usr/bin/env python3
"""Reference renderings of the published chat templates, for kiln's byte-for-byte tests.

Renders a set of conversations with the templates in assets/chat_templates/ (the published
texts, sources in its README.md) through jinja2 set up as Hugging Face transformers does for
apply_chat_template: a sandboxed environment with trim_blocks and lstrip_blocks, transformers' own
tojson filter (json.dumps(x, ensure_ascii=False, indent=..., ...): keys in their order, no HTML
escaping) and raise_exception. Writes one JSON object per line:

  {"messages": [...], "tools": [...] (when given), "add_generation_prompt": bool,
   "enable_thinking": bool (qwen3, when given), "date_string": "..." (llama3, when given),
   "rendered": "..."}

    python3 tools/chat_template_ref.py qwen2.5 > tests/fixtures/data/chat_template_ref.jsonl
    python3 tools/chat_template_ref.py qwen3 > tests/fixtures/data/chat_template_qwen3.jsonl
    python3 tools/chat_template_ref.py llama3 > tests/fixtures/data/chat_template_llama3.jsonl

(jinja2 3.1.2, Debian bookworm's python3-jinja2, run with /usr/bin/python3; tools only, never
needed by the build or the tests.) Where one renderer serves two published texts (qwen3.jinja and
qwen3-2504.jinja; llama3.1.jinja and llama3.2.jinja) every case is rendered with both and the
script stops if they differ, so the one expected string holds for both.

The fixture keeps the messages as a data file gives them; the templates render them as kiln reads
them ("normalised" below): text parts joined; a null or absent content as ""; tool-call arguments given as a JSON string parsed
into the object, except for Qwen3, whose template renders such a string as it is; for Llama 3
the bare call form {"name", "arguments"} given as OpenAI's {"function": {...}}, the only one its
template reads. Without a date_string Llama 3.2's template asks transformers' strftime_now for
today's date; here, as in kiln, it is not defined, so both texts fall back to "26 Jul 2024".
"""
import copy
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXTS = {
    "qwen2.5": ["qwen2.5.jinja"],
    "qwen3": ["qwen3.jinja", "qwen3-2504.jinja"],
    "llama3": ["llama3.1.jinja", "llama3.2.jinja"],
}
SPECIAL_TOKENS = {  # what transformers passes besides messages (tokenizer_config.json)
    "qwen2.5": {"bos_token": None, "eos_token": "<|im_end|>"},
    "qwen3": {"bos_token": None, "eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a zone <IANA> & \"quoted\", e.g. Z\u00fcrich.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {}}}

# The Qwen2.5 cases: (messages, tools), the plain ones first.
QWEN25 = [
    ([{"role": "user", "content": "What is the capital of France?"},
      {"role": "assistant", "content": "The capital of France is Paris."}], None),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 3 + 4?"},
      {"role": "assistant", "content": "3 + 4 = 7."}], None),
    ([{"role": "system", "content": "You answer in one line."},
      {"role": "user", "content": "Hi!"},
      {"role": "assistant", "content": "Hello. How can I help?"},
      {"role": "user", "content": "Spell 'cat' backwards.\nThanks."},
      {"role": "assistant", "content": "tac"},
      {"role": "system", "content": "A later system note."},
      {"role": "user", "content": "Caf\u00e9, \u00fcber, \u4f60\u597d \U0001F44D"},
      {"role": "assistant", "content": "\n  Indented reply with a leading line break."}], None),
    ([{"role": "user", "content": ""},
      {"role": "assistant", "content": ""}], None),
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
     [SEARCH]),
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

# Qwen3: (messages, tools); each rendered without a generation prompt, with one, and with one and
# enable_thinking false.
QWEN3 = [
    # the last assistant turn gets a think block even without reasoning
    ([{"role": "user", "content": "What is the capital of France?"},
      {"role": "assistant", "content": "Paris."}], None),
    # a first system message; reasoning in the content (earlier turn: dropped) and as a field
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "2 + 2?"},
      {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4."},
      {"role": "user", "content": "Times 3?"},
      {"role": "assistant", "reasoning_content": "\n4 times 3 is 12.\n", "content": "\n12."}], None),
    # <think> in the last turn's content: split, the block renders, newlines trimmed
    ([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\n\nThe user greets me.\n\n</think>\n\n\nHello!"}], None),
    # ends with a user message: only the generation prompt differs
    ([{"role": "system", "content": "You answer in one line."},
      {"role": "user", "content": "Hi!"},
      {"role": "assistant", "content": "Hello. How can I help?"},
      {"role": "system", "content": "A later system note."},
      {"role": "user", "content": "Caf\u00e9, \u00fcber, \u4f60\u597d \U0001F44D"}], None),
    # tools, no system message; a call turn after the query without reasoning gets no block,
    # the one with reasoning does; tool results grouped; string arguments rendered as given
    ([{"role": "user", "content": "Weather in Rome and the time in Tokyo?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"type": "function", "id": "c1",
           "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
          {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}]},
      {"role": "tool", "content": "sunny, 25 C"},
      {"role": "tool", "content": "21:04"},
      {"role": "assistant", "reasoning_content": "Both answered.", "content": "Checking once more.",
       "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}}]},
      {"role": "tool", "content": "25 C"},
      {"role": "assistant", "content": "Sunny and 25 C in Rome; 21:04 in Tokyo."}],
     [WEATHER, TIME]),
    # system plus tools; a user message that is only a tool response does not count as the query
    ([{"role": "system", "content": "You are a weather bot."},
      {"role": "user", "content": "And in Oslo?"},
      {"role": "assistant", "content": "<think>Need the tool.</think>Let me check.", "tool_calls": [
          {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
      {"role": "user", "content": "<tool_response>\nrain, 9 C\n</tool_response>"},
      {"role": "assistant", "content": "Rainy, 9 C."}],
     [WEATHER]),
    # a call with no content and the conversation ending in tool results; values of every type
    ([{"role": "user", "content": "Find caf\u00e9s."},
      {"role": "assistant", "content": None, "tool_calls": [
          {"function": {"name": "search", "arguments": {
              "query": "caf\u00e9 \"best\" <b>&amp;</b>\n", "limit": 5, "zeta": -1.5e-07,
              "filters": {"open": True, "rating": 4.5, "tags": ["a", "b"], "near": None},
              "alpha": [], "big": 12345678901234, "obj": {}}}}]},
      {"role": "tool", "content": "[]"}],
     [SEARCH, TIME]),
    # no user message at all: no turn comes after a query, so no think block
    ([{"role": "system", "content": "S"},
      {"role": "assistant", "content": "a"}], None),
    # empty contents, an empty reasoning field, text parts
    ([{"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
      {"role": "assistant", "reasoning_content": "", "content": ""}], None),
]

# Llama 3: (messages, tools, date_string); each rendered without and with a generation prompt.
LLAMA3 = [
    ([{"role": "user", "content": "What is the capital of France?"},
      {"role": "assistant", "content": "The capital of France is Paris."}], None, None),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 3 + 4?"},
      {"role": "assistant", "content": "3 + 4 = 7."},
      {"role": "user", "content": "And 5 + 6?"}], None, "15 Mar 2025"),
    # trimming (Python's str.strip(): Unicode spaces too), a later system message, non-ASCII
    ([{"role": "system", "content": "  \n You answer in one line.\u00a0\n"},
      {"role": "user", "content": "\u3000Hi!\t"},
      {"role": "assistant", "content": "\n  Hello. How can I help?  \n"},
      {"role": "system", "content": "A later system note."},
      {"role": "user", "content": "Caf\u00e9, \u00fcber, \u4f60\u597d \U0001F44D"},
      {"role": "assistant", "content": "Bien."}], None, "1 Jan 2025"),
    # tools in the first user message; a call, its result, the answer
    ([{"role": "system", "content": "You are a weather bot."},
      {"role": "user", "content": "  Weather in Paris?  "},
      {"role": "assistant", "tool_calls": [
          {"type": "function", "id": "call_1",
           "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
      {"role": "assistant", "content": "It is 18 \u00b0C and clear in Paris."}],
     [WEATHER, TIME], "26 Jul 2024"),
    # tools without a system message; the bare call form; arguments as a JSON string; nested
    # values of every type; a tool result with quotes and a line break
    ([{"role": "user", "content": "Find caf\u00e9s."},
      {"role": "assistant", "content": "", "tool_calls": [
          {"name": "search", "arguments": {
              "query": "caf\u00e9 \"best\" <b>&amp;</b>\n", "limit": 5, "zeta": -1.5e-07,
              "filters": {"open": True, "rating": 4.5, "tags": ["a", "b"], "near": None},
              "alpha": [], "big": 12345678901234, "obj": {}}}]},
      {"role": "tool", "content": "none \"found\"\nsorry"},
      {"role": "user", "content": "Time in Z\u00fcrich?"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"type": "function", "function": {"name": "get_time",
                                            "arguments": "{\"tz\": \"Europe/Z\u00fcrich\"}"}}]},
      {"role": "tool", "content": "21:04"}],
     [SEARCH, TIME], None),
    # empty contents
    ([{"role": "user", "content": ""},
      {"role": "assistant", "content": ""}], None, "2 Feb 2025"),
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' chat-template tojson (utils/chat_template_utils.py)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise RuntimeError(message)


def normalised(messages, family):
    """The messages as kiln reads them (see the module docstring)."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p["text"] for p in m["content"])
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls") or []
        for k, c in enumerate(calls):
            f = c.get("function", c)
            if isinstance(f.get("arguments"), str) and family != "qwen3":
                f["arguments"] = json.loads(f["arguments"])
            if family == "llama3" and "function" not in c:
                calls[k] = {"type": "function", "function": c}
    return out


def cases(family):
    if family == "qwen2.5":
        for messages, tools in QWEN25:
            for gen in (False, True):
                yield messages, tools, {"add_generation_prompt": gen}
    elif family == "qwen3":
        for messages, tools in QWEN3:
            yield messages, tools, {"add_generation_prompt": False}
            yield messages, tools, {"add_generation_prompt": True}
            yield messages, tools, {"add_generation_prompt": True, "enable_thinking": False}
    else:
        for messages, tools, date in LLAMA3:
            for gen in (False, True):
                options = {"add_generation_prompt": gen}
                if date is not None:
                    options["date_string"] = date
                yield messages, tools, options


def main():
    family = sys.argv[1] if len(sys.argv) == 2 else ""
    if family not in TEXTS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TEXTS)}")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    templates = [env.from_string((ROOT / "assets/chat_templates" / name).read_text(encoding="utf-8"))
                 for name in TEXTS[family]]
    for messages, tools, options in cases(family):
        kwargs = dict(options, **SPECIAL_TOKENS[family])
        if tools is not None:
            kwargs["tools"] = tools
        renders = [t.render(messages=normalised(messages, family), **kwargs) for t in templates]
        if any(r != renders[0] for r in renders):
            sys.exit(f"{TEXTS[family]} render differently: {json.dumps(messages)} {options}")
        line = {"messages": messages}
        if tools is not None:
            line["tools"] = tools
        line.update(options)
        line["rendered"] = renders[0]
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
