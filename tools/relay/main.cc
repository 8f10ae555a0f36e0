// colibri-relay: relays TCP connections through an emulated network link (a
// one-way delay and an optional bandwidth cap per direction), so that a cluster
// on one machine can be measured as if it ran over Ethernet. Flags are read
// here only.
//
// Prints "listening on HOST:PORT -> TARGET" on stdout for every route once all
// of them listen, and exits cleanly on SIGTERM / SIGINT.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/mutex_mode.h"
#include "common/shutdown_signals.h"
#include "common/version_flag.h"
#include "tools/relay/relay.h"
#include "tools/relay/relay_flags.h"

int main(int argc, char** argv) {
  colibri::UseReleaseMutexMode();
  CLI::App app{
      "colibri-relay: relays TCP through an emulated link (delay + bandwidth cap per direction)"};
  colibri::AddVersionFlag(&app, "colibri-relay");
  std::vector<std::string> routes;
  double delay_ms = 0;
  std::string bandwidth = "0";
  app.add_option("--route", routes,
                 "LISTEN=TARGET, each HOST:PORT (listen port 0: any); repeatable")
      ->required();
  app.add_option("--delay-ms", delay_ms, "one-way delay of each direction, in milliseconds")
      ->capture_default_str();
  app.add_option("--bandwidth", bandwidth,
                 "rate cap of each direction of each connection, e.g. 1Gbit, 100Mbit, 125MB "
                 "(0: unlimited)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  colibri::relay::Relay::Options options;
  for (const std::string& text : routes) {
    absl::StatusOr<colibri::relay::RouteSpec> route = colibri::relay::ParseRoute(text);
    if (!route.ok()) {
      std::cerr << "colibri-relay: " << route.status().message() << "\n";
      return 2;
    }
    options.routes.push_back(*route);
  }
  if (!std::isfinite(delay_ms) || delay_ms < 0 || delay_ms > 3.6e6) {
    std::cerr << "colibri-relay: --delay-ms must be between 0 and 3600000\n";
    return 2;
  }
  options.link.delay = std::chrono::nanoseconds(std::llround(delay_ms * 1e6));
  absl::StatusOr<uint64_t> rate = colibri::relay::ParseBandwidth(bandwidth);
  if (!rate.ok()) {
    std::cerr << "colibri-relay: --bandwidth: " << rate.status().message() << "\n";
    return 2;
  }
  options.link.bytes_per_second = *rate;

  const sigset_t signals = colibri::BlockShutdownSignals();
  ::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<colibri::relay::Relay>> relay =
      colibri::relay::Relay::Start(options);
  if (!relay.ok()) {
    std::cerr << "colibri-relay: " << relay.status().message() << "\n";
    return 1;
  }
  for (size_t i = 0; i < options.routes.size(); ++i) {
    std::printf("listening on %s -> %s\n", (*relay)->listen_addresses()[i].c_str(),
                options.routes[i].target.c_str());
  }
  std::fflush(stdout);

  colibri::WaitForShutdownSignal(signals);
  (*relay)->Stop();
  return 0;
}
