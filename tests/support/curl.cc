#include "tests/support/curl.h"

#include <cstdlib>
#include <utility>

#include "tests/support/subprocess.h"

namespace colibri::testing {

HttpReply Curl(const std::string& address, const std::string& path,
               std::vector<std::string> args) {
  std::vector<std::string> argv = {kCurl, "-sS", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("http://" + address + path);
  const CommandResult r = RunCommand(argv);
  HttpReply reply;
  const size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return reply;
  reply.status = std::atoi(r.out.c_str() + nl + 1);
  reply.body = r.out.substr(0, nl);
  return reply;
}

HttpReply PostJson(const std::string& address, const std::string& path, const nlohmann::json& body,
                   std::vector<std::string> args) {
  args.insert(args.end(),
              {"-X", "POST", "-H", "Content-Type: application/json", "--data-binary", body.dump()});
  return Curl(address, path, std::move(args));
}

}  // namespace colibri::testing
