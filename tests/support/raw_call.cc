#include "tests/support/raw_call.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace colibri::testing {

grpc::Status CallRaw(grpc::GenericStub* stub, const std::string& full_method,
                     const std::string& body, const std::string& authorization) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  stub->UnaryCall(&context, full_method, grpc::StubOptions(), &request, &response,
                  [&](grpc::Status s) {
                    std::lock_guard<std::mutex> lock(mu);
                    status = std::move(s);
                    done = true;
                    cv.notify_one();
                  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

}  // namespace colibri::testing
