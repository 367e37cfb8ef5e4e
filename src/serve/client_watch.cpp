#include "serve/client_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace lowbit::serve {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The numeric address and port of a socket address, as httplib formats them (inet_ntop, no brackets).
bool addr_port(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

bool endpoint_is(int fd, bool peer, const std::string& addr, int port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return false;
  std::string a;
  int p = -1;
  return addr_port(ss, &a, &p) && p == port && a == addr;
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, const std::string& local_addr,
                           int local_port) {
  if (remote_port < 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (!endpoint_is(static_cast<int>(fd), true, remote_addr, remote_port)) continue;
    // Several servers in one process (tests) may each hold a connection from the same client port number
    // on another local port: the local side decides.
    if (local_port >= 0 && !endpoint_is(static_cast<int>(fd), false, local_addr, local_port)) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  char c;
  for (;;) {
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // bytes waiting (a pipelined request): still there
    if (n == 0) return true;  // orderly shutdown
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;  // reset or another error: the connection is unusable
  }
}

ClientWatch::ClientWatch(std::string remote_addr, int remote_port, std::string local_addr, int local_port,
                         double every_s)
    : remote_addr_(std::move(remote_addr)),
      local_addr_(std::move(local_addr)),
      remote_port_(remote_port),
      local_port_(local_port),
      every_s_(every_s) {}

bool ClientWatch::alive() {
  if (gone_) return false;
  const double t = now_s();
  if (last_ >= 0 && t - last_ < every_s_) return true;
  last_ = t;
  if (fd_ == -2) fd_ = find_connection_socket(remote_addr_, remote_port_, local_addr_, local_port_);
  if (fd_ >= 0 && peer_closed(fd_)) gone_ = true;
  return !gone_;
}

}  // namespace lowbit::serve
