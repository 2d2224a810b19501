// Python's string methods as the chat templates use them, and transformers' tojson layouts.
#include "kiln/text/py_str.h"

#include <gtest/gtest.h>

#include "kiln/base/json.h"
#include "kiln/text/tojson.h"

namespace kiln::text {
namespace {

TEST(PyStr, StripChars) {
  EXPECT_EQ(py_lstrip("\n\nab\n", "\n"), "ab\n");
  EXPECT_EQ(py_rstrip("\nab\n\n", "\n"), "\nab");
  EXPECT_EQ(py_strip("\n a \n", "\n"), " a ");
  EXPECT_EQ(py_strip("\n\n", "\n"), "");
  EXPECT_EQ(py_strip("", "\n"), "");
}

// str.strip(): every character str.isspace() accepts, ASCII or not, and nothing else.
TEST(PyStr, TrimIsPythonStrip) {
  EXPECT_EQ(py_trim(" \t\n\r\x0b\x0c"
                    "a b"
                    "\x1c\x1d\x1e\x1f"),
            "a b");
  EXPECT_EQ(py_trim("\u00a0\u3000\u2003x\u0085\u2028\u2029\u202f\u205f\u1680"), "x");
  // Not whitespace to Python: U+200B ZERO WIDTH SPACE, U+FEFF, U+180E.
  EXPECT_EQ(py_trim("\u200bx\ufeff"), "\u200bx\ufeff");
  EXPECT_EQ(py_trim("\u180ex"), "\u180ex");
  EXPECT_EQ(py_trim("\u00e9 "), "\u00e9");  // a multi-byte character kept whole
  EXPECT_EQ(py_trim("   "), "");
}

TEST(PyStr, Split) {
  EXPECT_EQ(py_split_first("a</think>b</think>c", "</think>"), "a");
  EXPECT_EQ(py_split_last("a</think>b</think>c", "</think>"), "c");
  EXPECT_EQ(py_split_first("abc", "</think>"), "abc");
  EXPECT_EQ(py_split_last("abc", "<think>"), "abc");
}

// json.dumps(x, ensure_ascii=False, indent=4): "," then a line break per element, empty
// containers on one line.
TEST(ToJson, Indent) {
  const OrderedJson j = parse_json_ordered(
      R"({"b": [1, {"x": null}], "a": {}, "e": [], "s": "\u00fc\"\n", "f": 1.5e-07})", "t");
  EXPECT_EQ(tojson(j), R"({"b": [1, {"x": null}], "a": {}, "e": [], "s": "ü\"\n", "f": 1.5e-07})");
  EXPECT_EQ(tojson(j, 4),
            "{\n    \"b\": [\n        1,\n        {\n            \"x\": null\n        }\n    ],\n"
            "    \"a\": {},\n    \"e\": [],\n    \"s\": \"ü\\\"\\n\",\n    \"f\": 1.5e-07\n}");
  EXPECT_EQ(tojson(OrderedJson::array(), 4), "[]");
  EXPECT_EQ(tojson(OrderedJson("x"), 4), "\"x\"");
}

}  // namespace
}  // namespace kiln::text
