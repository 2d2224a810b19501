#include "kiln/hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <thread>

#include "kiln/base/error.h"

namespace kiln {

namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

struct Transfer {
  CURL* curl;
  const BodySink* sink;
  HttpResponse* resp;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->resp->headers.clear();  // a new response (after a redirect): keep the last one's only
  } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
    value.erase(value.begin(), std::find_if_not(value.begin(), value.end(), space));
    value.erase(std::find_if_not(value.rbegin(), value.rend(), space).base(), value.end());
    t->resp->headers[name] = value;
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->sink && status >= 200 && status < 300) {
    t->resp->status = status;
    if (!(*t->sink)(*t->resp, data, size * n)) {
      t->resp->aborted = true;
      return 0;  // libcurl stops with CURLE_WRITE_ERROR
    }
  } else if (t->resp->body.size() < kMaxErrorBody || !t->sink) {
    t->resp->body.append(data, size * n);
  }
  return size * n;
}

}  // namespace

std::string HttpResponse::header(const std::string& lowercase_name) const {
  const auto it = headers.find(lowercase_name);
  return it == headers.end() ? "" : it->second;
}

bool HttpResponse::retryable() const {
  if (aborted) return false;
  if (!error.empty()) return true;
  return status == 429 || (status >= 500 && status <= 599);
}

HttpClient::HttpClient(std::string token, RetryPolicy policy)
    : token_(std::move(token)), policy_(policy) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!curl_) fail("libcurl: cannot create a handle");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string HttpClient::escape(std::string_view s) const {
  std::unique_ptr<char, decltype(&curl_free)> e(
      curl_easy_escape(static_cast<CURL*>(curl_), s.data(), static_cast<int>(s.size())), curl_free);
  return e ? std::string(e.get()) : std::string(s);
}

HttpResponse HttpClient::request(const std::string& url, const std::vector<std::string>& headers,
                                 const BodySink* sink, bool head) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);
  HttpResponse resp;
  Transfer t{c, sink, &resp};
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  if (!token_.empty()) list = curl_slist_append(list, ("Authorization: Bearer " + token_).c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> owned(list, curl_slist_free_all);
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, policy_.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, policy_.stall_timeout_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "kiln/0.1.0");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  const CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc != CURLE_OK && !resp.aborted) {
    resp.error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  }
  return resp;
}

HttpResponse HttpClient::get(const std::string& url) {
  for (int attempt = 1;; ++attempt) {
    HttpResponse r = request(url, {});
    if (!r.retryable() || attempt >= policy_.attempts) return r;
    wait_before_retry(attempt, r);
  }
}

void HttpClient::wait_before_retry(int attempt, const HttpResponse& last) const {
  auto delay = policy_.first_delay * (1LL << std::min(attempt - 1, 20));
  if (const std::string after = last.header("retry-after"); !after.empty()) {
    char* end = nullptr;
    const long s = std::strtol(after.c_str(), &end, 10);
    if (end != after.c_str() && *end == '\0' && s >= 0) {
      delay = std::max<std::chrono::milliseconds>(delay, std::chrono::seconds(s));
    }
  }
  std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(delay, policy_.max_delay));
}

}  // namespace kiln
