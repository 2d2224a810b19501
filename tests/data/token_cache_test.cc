// load_dataset and the tokenized cache: miss then hit, a new cache when the data file, the
// tokenizer or a setting changes, rebuilding a corrupt cache, cache_dir, and falling back to
// memory when the cache cannot be written.
#include "kiln/data/token_cache.h"

#include <gtest/gtest.h>

#include <fstream>

#include "data_test_util.h"
#include "kiln/base/error.h"

namespace kiln {
namespace {

using test::TempDir;

std::string chat_line(int i) {
  return Json{
      {"messages",
       {{{"role", "user"}, {"content", fmt::format("What is {} + {}?", i, i + 1)}},
        {{"role", "assistant"}, {"content", fmt::format("{} + {} = {}.", i, i + 1, 2 * i + 1)}}}}}
      .dump();
}

void write_chat(const fs::path& path, int n, int first = 0) {
  std::string text;
  for (int i = first; i < first + n; ++i) text += chat_line(i) + "\n";
  write_file_atomic(path, text);
}

DataOptions chat_options(const TempDir& dir) {
  DataOptions o;
  o.path = dir / "train.jsonl";
  o.format = DataFormat::kChat;
  o.tokenizer = test::kTinyTokenizer;  // loads in milliseconds
  o.seq_len = 128;
  o.verbose = false;
  return o;
}

void expect_same_data(const TokenizedDataset& a, const TokenizedDataset& b) {
  EXPECT_EQ(a.stats(), b.stats());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(std::equal(a.offsets().begin(), a.offsets().end(), b.offsets().begin()));
  EXPECT_TRUE(std::equal(a.input_ids().begin(), a.input_ids().end(), b.input_ids().begin()));
  EXPECT_TRUE(std::equal(a.labels().begin(), a.labels().end(), b.labels().begin()));
}

TEST(TokenCache, MissThenHit) {
  TempDir dir("hit");
  write_chat(dir / "train.jsonl", 20);
  DataOptions o = chat_options(dir);
  const fs::path cache = data_cache_path(o);
  EXPECT_EQ(cache.parent_path(), dir / ".kiln-cache");
  EXPECT_EQ(cache.filename().string().rfind("train-", 0), 0u);
  EXPECT_EQ(cache.extension(), ".bin");

  const TokenizedDataset built = load_dataset(o, test::kVocab);
  EXPECT_FALSE(built.from_cache_hit());
  EXPECT_EQ(built.cache_path(), cache);  // mapped from the file it wrote
  ASSERT_TRUE(fs::exists(cache));
  EXPECT_EQ(built.stats().examples, 20);
  EXPECT_EQ(built.stats().lines, 20);

  o.verbose = true;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const TokenizedDataset hit = load_dataset(o, test::kVocab);
  const std::string log =
      ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(hit.from_cache_hit());
  EXPECT_HAS(log, "data cache hit");
  expect_same_data(hit, built);

  o.use_cache = false;  // the same data, never touching the cache
  const TokenizedDataset memory = load_dataset(o, test::kVocab);
  EXPECT_TRUE(memory.cache_path().empty());
  expect_same_data(memory, built);
}

TEST(TokenCache, KeyCoversDataTokenizerAndSettings) {
  TempDir dir("key");
  write_chat(dir / "train.jsonl", 5);
  fs::copy_file(test::kTinyTokenizer, dir / "tokenizer.json");
  DataOptions o = chat_options(dir);
  o.tokenizer = dir.path();  // a directory holding tokenizer.json
  const uint64_t key = data_cache_key(o);
  EXPECT_EQ(data_cache_key(o), key);  // stable

  const auto differs = [&](auto&& change) {
    DataOptions c = o;
    change(c);
    return data_cache_key(c) != key;
  };
  EXPECT_TRUE(differs([](DataOptions& c) { c.seq_len = 64; }));
  EXPECT_TRUE(differs([](DataOptions& c) { c.format = DataFormat::kText; }));
  EXPECT_TRUE(differs([](DataOptions& c) { c.overlong = Overlong::kDrop; }));
  EXPECT_TRUE(differs([](DataOptions& c) { c.train_on_prompt = true; }));
  EXPECT_TRUE(differs([](DataOptions& c) { c.skip_bad_lines = true; }));
  EXPECT_FALSE(differs([](DataOptions& c) { c.verbose = true; }));
  EXPECT_FALSE(differs([](DataOptions& c) { c.cache_dir = "/elsewhere"; }));

  // The tokenizer's content, not its name.
  {
    std::ofstream f(dir / "tokenizer.json", std::ios::app);
    f << "\n";
  }
  EXPECT_NE(data_cache_key(o), key);
}

TEST(TokenCache, ChangingTheDataFileRebuilds) {
  TempDir dir("data");
  write_chat(dir / "train.jsonl", 10);
  DataOptions o = chat_options(dir);
  const TokenizedDataset first = load_dataset(o, test::kVocab);
  ASSERT_EQ(first.size(), 10u);

  write_chat(dir / "train.jsonl", 12);  // new size
  const TokenizedDataset second = load_dataset(o, test::kVocab);
  EXPECT_FALSE(second.from_cache_hit());
  EXPECT_EQ(second.size(), 12u);
  EXPECT_NE(second.cache_path(), first.cache_path());

  // Same size, new content and modification time.
  write_chat(dir / "train.jsonl", 12, 1);
  fs::last_write_time(dir / "train.jsonl",
                      fs::last_write_time(dir / "train.jsonl") + std::chrono::seconds(5));
  const TokenizedDataset third = load_dataset(o, test::kVocab);
  EXPECT_FALSE(third.from_cache_hit());
  EXPECT_NE(third.cache_path(), second.cache_path());
  EXPECT_TRUE(load_dataset(o, test::kVocab).from_cache_hit());

  // A setting: a cache of its own, both kept.
  o.train_on_prompt = true;
  const TokenizedDataset prompt = load_dataset(o, test::kVocab);
  EXPECT_FALSE(prompt.from_cache_hit());
  EXPECT_GT(prompt.stats().targets, third.stats().targets);
  o.train_on_prompt = false;
  EXPECT_TRUE(load_dataset(o, test::kVocab).from_cache_hit());
}

// Issue 34: a data file edited in place with its size and modification time kept (rsync -t, cp -p
// of another version) was trained from its stale cache. The key holds the file's content.
TEST(TokenCache, AnEditKeepingSizeAndTimeRebuilds) {
  TempDir dir("same_stat");
  const fs::path path = dir / "train.jsonl";
  write_chat(path, 10);
  DataOptions o = chat_options(dir);
  const TokenizedDataset first = load_dataset(o, test::kVocab);
  ASSERT_TRUE(load_dataset(o, test::kVocab).from_cache_hit());

  const auto edit_keeping_stat = [&](size_t at, char c) {
    const auto when = fs::last_write_time(path);
    std::string bytes = read_file(path);
    ASSERT_LT(at, bytes.size());
    ASSERT_NE(bytes[at], c);
    bytes[at] = c;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    fs::last_write_time(path, when);
  };
  const std::string text = read_file(path);
  edit_keeping_stat(text.find("What is 3"), 'T');  // "That is 3 + 4?"
  const TokenizedDataset second = load_dataset(o, test::kVocab);
  EXPECT_FALSE(second.from_cache_hit());
  EXPECT_NE(second.cache_path(), first.cache_path());
  EXPECT_FALSE(std::equal(first.input_ids().begin(), first.input_ids().end(),
                          second.input_ids().begin(), second.input_ids().end()));

  // Past 64 MiB the key hashes the first and last MiB and blocks between: an edit in either
  // end changes it.
  std::string big(size_t{70} << 20, ' ');
  write_file_atomic(path, big);
  const uint64_t key = data_cache_key(o);
  edit_keeping_stat(100, 'x');
  const uint64_t head = data_cache_key(o);
  EXPECT_NE(head, key);
  edit_keeping_stat(big.size() - 100, 'x');
  EXPECT_NE(data_cache_key(o), head);
}

void corrupt(const fs::path& path, const std::function<void(std::string&)>& edit) {
  std::string bytes = read_file(path);
  edit(bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(TokenCache, CorruptCacheIsRebuilt) {
  TempDir dir("corrupt");
  write_chat(dir / "train.jsonl", 8);
  const DataOptions o = chat_options(dir);
  load_dataset(o, test::kVocab);
  const fs::path cache = data_cache_path(o);
  ASSERT_TRUE(fs::exists(cache));
  // The reference lives in memory: the cache's own mapping would see the damage done in place.
  DataOptions in_memory = o;
  in_memory.use_cache = false;
  const TokenizedDataset good = load_dataset(in_memory, test::kVocab);
  const uint64_t key = data_cache_key(o);
  const std::vector<std::pair<std::string, std::function<void(std::string&)>>> damages = {
      {"shorter than its header", [](std::string& b) { b.resize(100); }},
      {"does not match its header", [](std::string& b) { b.resize(b.size() - 4); }},
      {"does not match its header", [](std::string& b) { b += "xxxx"; }},
      {"checksum mismatch", [](std::string& b) { b[b.size() / 2] ^= 0x10; }},
      {"checksum mismatch", [](std::string& b) { b[40] ^= 1; }},  // a count in the header
      {"not a kiln token cache", [](std::string& b) { b[0] = 'X'; }},
      {"format version", [](std::string& b) { b[8] = 99; }},
      {"built with other settings", [](std::string& b) { b[16] ^= 1; }},
  };
  for (const auto& [reason, damage] : damages) {
    corrupt(cache, damage);
    std::string why;
    EXPECT_FALSE(open_token_cache(cache, key, "t", &why).has_value());
    EXPECT_HAS(why, reason);
    const TokenizedDataset rebuilt = load_dataset(o, test::kVocab);
    EXPECT_FALSE(rebuilt.from_cache_hit()) << reason;
    expect_same_data(rebuilt, good);
    EXPECT_TRUE(load_dataset(o, test::kVocab).from_cache_hit()) << reason;
  }
}

TEST(TokenCache, CacheDirAndUnwritableFallback) {
  TempDir dir("dir");
  write_chat(dir / "train.jsonl", 4);
  DataOptions o = chat_options(dir);
  o.cache_dir = dir / "caches";
  const TokenizedDataset d = load_dataset(o, test::kVocab);
  EXPECT_EQ(d.cache_path().parent_path(), dir / "caches");
  EXPECT_FALSE(fs::exists(dir / ".kiln-cache"));

  write_file_atomic(dir / "a-file", "x");
  o.cache_dir = dir / "a-file" / "sub";  // cannot be created
  const TokenizedDataset memory = load_dataset(o, test::kVocab);
  EXPECT_TRUE(memory.cache_path().empty());
  expect_same_data(memory, d);
}

TEST(LoadDataset, Errors) {
  TempDir dir("errors");
  write_chat(dir / "train.jsonl", 3);
  DataOptions o = chat_options(dir);
  const auto error = [&](const DataOptions& opts, int64_t vocab) {
    try {
      load_dataset(opts, vocab);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_HAS(error(o, 600), "out of range for the model's vocab_size 600");
  load_dataset(o, test::kVocab);
  EXPECT_HAS(error(o, 600), "out of range for the model's vocab_size 600");  // on a cache hit
  DataOptions no_tok = o;
  no_tok.tokenizer = dir.path();
  EXPECT_HAS(error(no_tok, test::kVocab), "no tokenizer.json there, which data.format chat needs");
  DataOptions missing = o;
  missing.path = dir / "nope.jsonl";
  EXPECT_HAS(error(missing, test::kVocab), "nope.jsonl: cannot read");
  // A bad line names the file given.
  write_file_atomic(dir / "train.jsonl", chat_line(0) + "\n{\"messages\": 3}\n");
  EXPECT_HAS(error(o, test::kVocab), (dir / "train.jsonl").string() + ":2: messages:");
}

TEST(LoadDataset, TokensFormatIsReadDirectly) {
  TempDir dir("tokens");
  write_file_atomic(dir / "t.jsonl", "{\"input_ids\": [1, 2, 3, 4, 5]}\n{\"input_ids\": [6]}\n");
  DataOptions o;
  o.path = dir / "t.jsonl";
  o.seq_len = 4;
  o.verbose = false;
  const TokenizedDataset d = load_dataset(o, 10);
  EXPECT_TRUE(d.cache_path().empty());
  EXPECT_FALSE(fs::exists(dir / ".kiln-cache"));
  EXPECT_EQ(d.stats().truncated, 1);
  EXPECT_EQ(d.stats().tokens, 5);
  o.overlong = Overlong::kDrop;
  EXPECT_EQ(load_dataset(o, 10).stats().dropped, 1);
}

TEST(HashBytes, SpreadsAndDependsOnSeed) {
  const std::string a = "kiln", b = "kilm";
  EXPECT_NE(hash_bytes(a.data(), a.size()), hash_bytes(b.data(), b.size()));
  EXPECT_NE(hash_bytes(a.data(), a.size(), 1), hash_bytes(a.data(), a.size(), 2));
  EXPECT_NE(hash_bytes(a.data(), 3), hash_bytes(a.data(), 4));
  EXPECT_EQ(hash_bytes("", 0), hash_bytes("", 0));
  const std::string zeros(16, '\0'), zeros2(24, '\0');
  EXPECT_NE(hash_bytes(zeros.data(), zeros.size()), hash_bytes(zeros2.data(), zeros2.size()));
}

}  // namespace
}  // namespace kiln
