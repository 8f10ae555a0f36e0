// The thread that runs a cpp-httplib server's accept loop.
#ifndef COLIBRI_COMMON_HTTP_LISTENER_H_
#define COLIBRI_COMMON_HTTP_LISTENER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace colibri {

// Runs server->listen_after_bind() (the socket is bound already) on a new
// thread and returns the thread once the server is in its accept loop, or
// listening has already ended. cpp-httplib's stop() only stops a server that
// is running: a stop() that came before the loop started (a later start-up
// step failing at once) would leave the loop running and the join on this
// thread waiting forever. Server: httplib::Server (a template, so that this
// header does not pull in httplib.h).
template <typename Server>
std::thread StartHttpListener(Server* server) {
  auto ended = std::make_shared<std::atomic<bool>>(false);
  std::thread listener([server, ended] {
    server->listen_after_bind();
    ended->store(true);
  });
  while (!server->is_running() && !ended->load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return listener;
}

}  // namespace colibri

#endif  // COLIBRI_COMMON_HTTP_LISTENER_H_
