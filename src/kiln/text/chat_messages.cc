#include "kiln/text/chat_messages.h"

#include <algorithm>
#include <array>

#include "kiln/base/error.h"
#include "kiln/text/tojson.h"
#include "kiln/text/utf8.h"

namespace kiln {

namespace {

const OrderedJson& field(const OrderedJson& obj, const char* key, const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}.{} is missing", what, key);
  return *it;
}

std::string string_of(const OrderedJson& v, const std::string& what) {
  if (!v.is_string()) fail("{} is a JSON {}, expected a string", what, v.type_name());
  return v.get<std::string>();
}

template <size_t N>
void only_fields(const OrderedJson& obj, const std::array<const char*, N>& allowed,
                 const std::string& what) {
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();  // a binding, not captured (clang 14 cannot)
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail("{}.{} is not supported (kiln's chat templates render {})", what, text::printable(key),
           list);
    }
  }
}

// A string, or a list of text parts joined.
std::string content_of(const OrderedJson& c, const std::string& what) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    fail("{} is a JSON {}, expected a string or a list of parts", what, c.type_name());
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string part = fmt::format("{}[{}]", what, i);
    if (!c[i].is_object()) fail("{} is a JSON {}, expected an object", part, c[i].type_name());
    only_fields(c[i], std::array{"type", "text"}, part);
    const std::string type = string_of(field(c[i], "type", part), part + ".type");
    if (type != "text") fail("{}.type is '{}', expected text", part, text::printable(type));
    out += string_of(field(c[i], "text", part), part + ".text");
  }
  return out;
}

ToolCall tool_call_of(const OrderedJson& c, const std::string& what) {
  if (!c.is_object()) fail("{} is a JSON {}, expected an object", what, c.type_name());
  const OrderedJson* f = &c;
  std::string fwhat = what;
  if (c.contains("function")) {
    only_fields(c, std::array{"type", "id", "function"}, what);
    if (c.contains("type") && c.at("type") != "function") {
      fail("{}.type is {}, expected \"function\"", what, c.at("type").dump());
    }
    f = &c.at("function");
    fwhat = what + ".function";
    if (!f->is_object()) fail("{} is a JSON {}, expected an object", fwhat, f->type_name());
  }
  only_fields(*f, std::array{"name", "arguments"}, fwhat);
  ToolCall call;
  call.name = string_of(field(*f, "name", fwhat), fwhat + ".name");
  const OrderedJson& arguments = field(*f, "arguments", fwhat);
  call.arguments = tool_arguments_json(arguments, fwhat + ".arguments");
  if (arguments.is_string()) call.arguments_text = arguments.get<std::string>();
  return call;
}

ChatMessage message_of(const OrderedJson& m, const std::string& what) {
  if (!m.is_object()) fail("{} is a JSON {}, expected an object", what, m.type_name());
  ChatMessage msg;
  msg.role = string_of(field(m, "role", what), what + ".role");
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
    fail("{}.role is '{}', expected system, user, assistant or tool", what,
         text::printable(msg.role));
  }
  if (msg.role == "assistant") {
    only_fields(m, std::array{"role", "content", "tool_calls", "reasoning_content"}, what);
    if (const auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
      msg.reasoning_content = string_of(*r, what + ".reasoning_content");
    }
  } else if (msg.role == "tool") {
    only_fields(m, std::array{"role", "content", "name", "tool_call_id"}, what);
  } else {
    only_fields(m, std::array{"role", "content"}, what);
  }
  if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
    const std::string cwhat = what + ".tool_calls";
    if (!calls->is_array()) fail("{} is a JSON {}, expected an array", cwhat, calls->type_name());
    for (size_t k = 0; k < calls->size(); ++k) {
      msg.tool_calls.push_back(tool_call_of((*calls)[k], fmt::format("{}[{}]", cwhat, k)));
    }
  }
  const auto content = m.find("content");
  const bool may_omit = !msg.tool_calls.empty();
  if (content == m.end() || content->is_null()) {
    if (!may_omit) fail("{}.content is missing", what);
  } else {
    msg.content = content_of(*content, what + ".content");
  }
  return msg;
}

}  // namespace

std::string tool_arguments_json(const OrderedJson& arguments, const std::string& what) {
  if (!arguments.is_string()) return tojson(arguments);
  OrderedJson parsed;
  try {
    parsed = OrderedJson::parse(arguments.get<std::string>());
  } catch (const OrderedJson::parse_error& e) {
    fail("{} is a string but not JSON: {}", what, e.what());
  }
  if (!parsed.is_object()) {
    fail("{} is a JSON string holding a {}, expected an object", what, parsed.type_name());
  }
  return tojson(parsed);
}

std::vector<ChatMessage> chat_messages_from_json(const OrderedJson& messages,
                                                 const std::string& what) {
  if (!messages.is_array()) fail("{} is a JSON {}, expected an array", what, messages.type_name());
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    out.push_back(message_of(messages[i], fmt::format("{}[{}]", what, i)));
  }
  return out;
}

std::vector<OrderedJson> chat_tools_from_json(const OrderedJson& tools, const std::string& what) {
  if (tools.is_null()) return {};
  if (!tools.is_array()) fail("{} is a JSON {}, expected an array", what, tools.type_name());
  std::vector<OrderedJson> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].is_object()) {
      fail("{}[{}] is a JSON {}, expected an object", what, i, tools[i].type_name());
    }
    tojson(tools[i]);  // checks its strings' UTF-8 now, not at rendering
    out.push_back(tools[i]);
  }
  return out;
}

}  // namespace kiln
