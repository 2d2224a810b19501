#include "kiln/data/conversation.h"

#include "kiln/base/error.h"
#include "kiln/text/chat_messages.h"
#include "kiln/text/utf8.h"

namespace kiln {

namespace {

std::string string_at(const OrderedJson& obj, const char* key, const std::string& field,
                      const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}: missing field '{}'", where, field);
  if (!it->is_string()) fail("{}: {}: expected a string, got {}", where, field, json_preview(*it));
  return it->get<std::string>();
}

std::string optional_string(const OrderedJson& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (!it->is_string()) fail("{}: {}: expected a string, got {}", where, key, json_preview(*it));
  return it->get<std::string>();
}

// Runs f, prefixing the errors of the text layer's parsers with the file and line.
template <typename F>
auto at_line(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

// "tools": a list, or (as ShareGPT files write it) a JSON string of one.
std::vector<OrderedJson> tools_of(const OrderedJson& line, const std::string& where) {
  const auto it = line.find("tools");
  if (it == line.end() || it->is_null()) return {};
  if (!it->is_string()) return at_line(where, [&] { return chat_tools_from_json(*it, "tools"); });
  if (it->get_ref<const std::string&>().empty()) return {};
  const OrderedJson parsed = at_line(
      where, [&] { return parse_json_ordered(it->get_ref<const std::string&>(), "tools"); });
  return at_line(where, [&] { return chat_tools_from_json(parsed, "tools"); });
}

// A function_call turn's value: {"name", "arguments"} or a list of them, as JSON text.
std::vector<ToolCall> function_calls(const std::string& value, const std::string& field,
                                     const std::string& where) {
  OrderedJson v;
  try {
    v = OrderedJson::parse(value);
  } catch (const OrderedJson::parse_error& e) {
    fail("{}: {}: a function_call value must be JSON {{\"name\", \"arguments\"}}: {}", where, field,
         e.what());
  }
  if (v.is_object()) v = OrderedJson::array({v});
  if (!v.is_array() || v.empty()) {
    fail("{}: {}: expected {{\"name\", \"arguments\"}} or a list of them, got {}", where, field,
         json_preview(v));
  }
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = v.size() > 1 ? fmt::format("{}[{}]", field, i) : field;
    if (!v[i].is_object()) fail("{}: {}: expected an object, got {}", where, f, json_preview(v[i]));
    for (const auto& [key, unused] : v[i].items()) {
      if (key != "name" && key != "arguments") {
        fail("{}: {}.{}: not supported (a call has name and arguments)", where, f,
             text::printable(key));
      }
    }
    ToolCall c;
    c.name = string_at(v[i], "name", f + ".name", where);
    if (!v[i].contains("arguments")) fail("{}: missing field '{}.arguments'", where, f);
    const OrderedJson& arguments = v[i].at("arguments");
    c.arguments = at_line(where, [&] { return tool_arguments_json(arguments, f + ".arguments"); });
    if (arguments.is_string()) c.arguments_text = arguments.get<std::string>();
    calls.push_back(std::move(c));
  }
  return calls;
}

ChatMessage sharegpt_turn(const OrderedJson& t, size_t i, const std::string& where) {
  const std::string field = fmt::format("conversations[{}]", i);
  if (!t.is_object()) {
    fail("{}: {}: expected an object with from and value, got {}", where, field, json_preview(t));
  }
  for (const auto& [key, unused] : t.items()) {
    if (key != "from" && key != "value") {
      fail("{}: {}.{}: not supported (a turn has from and value)", where, field,
           text::printable(key));
    }
  }
  const std::string from = string_at(t, "from", field + ".from", where);
  const std::string value = string_at(t, "value", field + ".value", where);
  if (from == "system" && i == 0) return {"system", value};
  if (from == "human" || from == "user") return {"user", value};
  if (from == "gpt" || from == "assistant") return {"assistant", value};
  if (from == "observation" || from == "tool") return {"tool", value};
  if (from == "function_call") {
    return {"assistant", "", function_calls(value, field + ".value", where)};
  }
  if (from == "system") {
    fail("{}: {}.from: system is only allowed as the first turn", where, field);
  }
  fail("{}: {}.from: expected system, human, gpt, function_call, observation or tool, got '{}'",
       where, field, text::printable(from));
}

}  // namespace

Conversation chat_conversation(const OrderedJson& line, const std::string& where) {
  const auto it = line.find("messages");
  if (it == line.end()) fail("{}: missing field 'messages'", where);
  if (!it->is_array() || it->empty()) {
    fail("{}: messages: expected a non-empty list of messages, got {}", where, json_preview(*it));
  }
  Conversation c;
  c.messages = at_line(where, [&] { return chat_messages_from_json(*it, "messages"); });
  c.tools = tools_of(line, where);
  return c;
}

Conversation sharegpt_conversation(const OrderedJson& line, const std::string& where) {
  const auto it = line.find("conversations");
  if (it == line.end()) fail("{}: missing field 'conversations'", where);
  if (!it->is_array() || it->empty()) {
    fail("{}: conversations: expected a non-empty list of turns, got {}", where, json_preview(*it));
  }
  Conversation c;
  const std::string system = optional_string(line, "system", where);
  if (!system.empty()) c.messages.push_back({"system", system});
  for (size_t i = 0; i < it->size(); ++i) {
    ChatMessage m = sharegpt_turn((*it)[i], i, where);
    if (m.role == "system" && !system.empty()) {
      fail("{}: conversations[0]: a system turn and a system field; give one", where);
    }
    c.messages.push_back(std::move(m));
  }
  c.tools = tools_of(line, where);
  return c;
}

Conversation instruction_conversation(const OrderedJson& line, const std::string& where) {
  Conversation c;
  const std::string system = optional_string(line, "system", where);
  if (!system.empty()) c.messages.push_back({"system", system});
  if (const auto h = line.find("history"); h != line.end() && !h->is_null()) {
    if (!h->is_array()) {
      fail("{}: history: expected a list of [question, answer] pairs, got {}", where,
           json_preview(*h));
    }
    for (size_t i = 0; i < h->size(); ++i) {
      const OrderedJson& pair = (*h)[i];
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        fail("{}: history[{}]: expected [question, answer] (two strings), got {}", where, i,
             json_preview(pair));
      }
      c.messages.push_back({"user", pair[0].get<std::string>()});
      c.messages.push_back({"assistant", pair[1].get<std::string>()});
    }
  }
  std::string user = string_at(line, "instruction", "instruction", where);
  const std::string input = optional_string(line, "input", where);
  if (!input.empty()) user += "\n\n" + input;
  c.messages.push_back({"user", std::move(user)});
  c.messages.push_back({"assistant", string_at(line, "output", "output", where)});
  return c;
}

}  // namespace kiln
