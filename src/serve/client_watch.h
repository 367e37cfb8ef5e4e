// Whether the client of a non-streaming request is still connected.
//
// cpp-httplib (0.11) gives a handler neither its socket nor a "client gone" signal: a streaming response
// learns of a disconnect when a chunk write fails, but a non-streaming one writes only at the end, so a
// client that gave up would keep its sequence decoding to max_tokens. ClientWatch finds the connection's
// socket by its address pair (the handler's thread owns that socket until the handler returns, so the
// descriptor cannot be closed or reused meanwhile) and peeks it: end of stream or an error means the client
// has gone. A client that half-closes its sending side while it still waits for the answer would be taken for
// gone; HTTP clients (curl, the OpenAI SDKs, browsers) do not do that, and uvicorn-based servers judge it the
// same way.
#pragma once
#include <string>

namespace lowbit::serve {

class ClientWatch {
 public:
  // The request's addresses as httplib reports them (Request::remote_addr/remote_port/local_addr/local_port).
  ClientWatch(std::string remote_addr, int remote_port, std::string local_addr, int local_port,
              double every_s = 0.25);
  // false once the client has closed or reset the connection. Looks at the socket at most every `every_s`
  // seconds (the first look also finds it); true when the socket cannot be found (nothing is cancelled on a
  // guess).
  bool alive();

 private:
  std::string remote_addr_, local_addr_;
  int remote_port_, local_port_;
  double every_s_, last_ = -1;
  int fd_ = -2;  // -2: not looked for yet; -1: not found
  bool gone_ = false;
};

// The descriptor of this process's TCP socket connected from remote to local, or -1 (Linux: /proc/self/fd).
int find_connection_socket(const std::string& remote_addr, int remote_port, const std::string& local_addr,
                           int local_port);
// The peer of a connected socket has closed it (orderly shutdown or reset), without consuming any data.
bool peer_closed(int fd);

}  // namespace lowbit::serve
