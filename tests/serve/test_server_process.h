// Starts `lowbit serve ... --port 0` as a child process for the server tests, waits for its
// `listening on http://HOST:PORT` line and kills it when the test ends, whatever the path (RAII; the child
// also dies with the test process: PR_SET_PDEATHSIG). HTTP helpers on top of httplib::Client.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lowbit::testing_serve {

inline std::string lowbit_exe() {
  return std::string(LOWBIT_BINARY_DIR) + "/apps/lowbit/lowbit";
}
inline std::string stories_model() {
  return std::string(LOWBIT_SHARED_DIR) + "/models/stories260K/stories260K.bin";
}

class ServerProcess {
 public:
  // args: everything after `lowbit serve` except --port (always 0). Throws when the server does not print its
  // listen line within timeout_s (the message holds its stderr).
  explicit ServerProcess(std::vector<std::string> args, double timeout_s = 60) {
    log_path_ = ::testing::TempDir() + "lowbit_serve_" + std::to_string(::getpid()) + "_" +
                std::to_string(counter()++) + ".log";
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv_s = {lowbit_exe(), "serve", "--port", "0"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;  // built before fork: the child only calls async-signal-safe functions
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out[1], 1);
      const int err = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, 2);
      close(out[0]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    std::string line;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (line.find('\n') == std::string::npos) {
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())
              .count());
      pollfd p{out_, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) <= 0) break;
      char buf[256];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    const std::string prefix = "listening on http://";
    const size_t at = line.find(prefix), colon = line.rfind(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at + prefix.size()) {
      kill_now();
      throw std::runtime_error("lowbit serve did not start (stdout: '" + line + "'):\n" + log());
    }
    host_ = line.substr(at + prefix.size(), colon - at - prefix.size());
    port_ = std::stoi(line.substr(colon + 1));
  }
  ~ServerProcess() {
    kill_now();
    if (out_ >= 0) close(out_);
    std::remove(log_path_.c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  httplib::Client client(int read_timeout_s = 120) const {
    httplib::Client c(host_, port_);
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(read_timeout_s, 0);
    c.set_write_timeout(30, 0);
    return c;
  }
  // Sends sig and waits up to timeout_s for the exit: its exit code, or -1 (killed by a signal / still
  // running, then killed).
  int stop(int sig, double timeout_s) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill_now();
    return -1;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid_ = -1;
  int out_ = -1;
  std::string host_, log_path_;
  int port_ = 0;
};

struct Reply {
  int status = -1;  // -1: no response (connection error)
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline Reply post(const ServerProcess& s, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
  auto c = s.client();
  auto r = c.Post(path.c_str(), headers, body, "application/json");
  if (!r) return {};
  return {r->status, r->body};
}
inline Reply post(const ServerProcess& s, const std::string& path, const nlohmann::json& body) {
  return post(s, path, body.dump());
}
inline Reply post(const ServerProcess& s, const std::string& path, const char* body) {
  return post(s, path, std::string(body));
}
inline Reply get(const ServerProcess& s, const std::string& path) {
  auto c = s.client();
  auto r = c.Get(path.c_str());
  if (!r) return {};
  return {r->status, r->body};
}

// The `data:` payloads of a server-sent-events body, in order ("[DONE]" included as is).
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

// The value of an unlabelled Prometheus sample (or a labelled one: name{...}), -1 when absent.
inline double metric(const std::string& text, const std::string& sample) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(sample + " ", 0) == 0) return std::stod(line.substr(sample.size() + 1));
  return -1;
}

}  // namespace lowbit::testing_serve
