// HTTP through libcurl, as the hub needs it: TLS, proxies from the environment (http_proxy,
// https_proxy, no_proxy: libcurl reads them), redirects followed (the hub sends LFS files to its
// file storage), connect and stall timeouts, the token as a bearer header (libcurl drops it on a
// redirect to another host), and retries with backoff on transport errors, 429 and 5xx.
// One client (one curl handle) per thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct RetryPolicy {
  int attempts = 6;                             // tries of one request, the first included
  std::chrono::milliseconds first_delay{1000};  // doubled after each failed try ...
  std::chrono::milliseconds max_delay{std::chrono::seconds(30)};  // ... up to this
  long connect_timeout_s = 15;
  long stall_timeout_s = 60;  // a transfer that moves under 1 byte/s this long is cut
};

struct HttpResponse {
  long status = 0;                             // 0: no response (see error)
  std::map<std::string, std::string> headers;  // the last response's, names lowercase
  std::string body;      // the body, when no sink took it (an error's, at most 64 KiB)
  std::string error;     // libcurl's reason when the transfer failed
  bool aborted = false;  // the sink asked to stop

  std::string header(const std::string& lowercase_name) const;
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
  // Worth another try: the connection failed or broke, or the server said 429 or 5xx.
  bool retryable() const;
};

// Takes each piece of a successful (2xx) response's body, with that response's status and
// headers (`head`: its body empty); returning false stops the transfer.
using BodySink = std::function<bool(const HttpResponse& head, const char* data, size_t n)>;

class HttpClient {
 public:
  explicit HttpClient(std::string token, RetryPolicy policy = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One request, no retries. `headers`: "Name: value" lines. With `sink`, a 2xx body goes to it.
  HttpResponse request(const std::string& url, const std::vector<std::string>& headers,
                       const BodySink* sink = nullptr, bool head = false);
  // GET into memory, retried per the policy while retryable().
  HttpResponse get(const std::string& url);
  // Waits before try `attempt` + 1 (attempt counts from 1): the backoff, or the server's
  // Retry-After when that is longer, capped at max_delay.
  void wait_before_retry(int attempt, const HttpResponse& last) const;

  const RetryPolicy& policy() const { return policy_; }
  // Percent-encodes one URL path segment ('/' too).
  std::string escape(std::string_view s) const;

 private:
  void* curl_ = nullptr;  // CURL*
  std::string token_;
  RetryPolicy policy_;
};

}  // namespace kiln
