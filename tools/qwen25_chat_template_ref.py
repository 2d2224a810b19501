#!/usr/bin/env python3
"""Reference renderings of the Qwen2.5 chat template, for tests/data/formats_test.cc.

Renders a few conversations with the template of Qwen2.5-Instruct's tokenizer_config.json
(copied below verbatim), through jinja2 set up as Hugging Face transformers does for
apply_chat_template (sandboxed, trim_blocks, lstrip_blocks), and writes one JSON object per line:
{"messages": [...], "add_generation_prompt": bool, "rendered": "..."}.

Made with:  python3 tools/qwen25_chat_template_ref.py > tests/fixtures/data/chat_template_ref.jsonl
(jinja2 3.1). Never needed by the build.

With --template it writes the template itself instead (no jinja2 needed), which kiln embeds for
model directories whose base has no chat template:
  python3 tools/qwen25_chat_template_ref.py --template > tests/fixtures/data/qwen25_chat_template.jinja
"""
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


def main():
    if sys.argv[1:] == ["--template"]:
        sys.stdout.write(TEMPLATE)
        return
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(TEMPLATE)
    for messages in CONVERSATIONS:
        for gen in (False, True):
            rendered = template.render(messages=messages, add_generation_prompt=gen)
            sys.stdout.write(json.dumps({"messages": messages, "add_generation_prompt": gen,
                                         "rendered": rendered}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
