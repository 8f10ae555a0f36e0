# Writes OUTPUT, a C++ source defining `extern const char SYMBOL[]` in
# namespace NAMESPACE with the bytes of INPUT (a text file), so that a page
# or template ships inside the binary and is still edited as its own file.
#   cmake -DINPUT=... -DOUTPUT=... -DSYMBOL=... -DNAMESPACE=... -P EmbedText.cmake
file(READ "${INPUT}" text)
set(delimiter "colibri_embed")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delimiter}\"")
endif()
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${INPUT} by cmake/EmbedText.cmake; edit that file.\n"
     "namespace ${NAMESPACE} {\n"
     "extern const char ${SYMBOL}[];\n"
     "const char ${SYMBOL}[] = R\"${delimiter}(${text})${delimiter}\";\n"
     "}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
