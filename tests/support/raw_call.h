// One unary gRPC call with arbitrary request bytes, for tests that send what
// a generated stub would refuse to build (garbage, oversized bodies, methods
// the service does not have).
#ifndef COLIBRI_TESTS_SUPPORT_RAW_CALL_H_
#define COLIBRI_TESTS_SUPPORT_RAW_CALL_H_

#include <string>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace colibri::testing {

// Calls `full_method` ("/package.Service/Method") through `stub` with `body`
// as the raw request and waits for the status (at most 30 s). A non-empty
// `authorization` is sent as that metadata value. A streaming method's error
// status arrives the same way.
grpc::Status CallRaw(grpc::GenericStub* stub, const std::string& full_method,
                     const std::string& body, const std::string& authorization = "");

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_RAW_CALL_H_
