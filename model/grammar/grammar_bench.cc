// colibri_grammar_bench <vocab.gguf> <schema.json> <prefix>...: the cost of
// one token mask from the state after each prefix (bytes of compact JSON): the
// first (automaton states built on the way) and, with the automaton warm and
// the mask cache bypassed, the median and spread of 9 interleaved walks.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/gguf/gguf_file.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace colibri;
  if (argc < 4) {
    std::cerr << "usage: colibri_grammar_bench <vocab.gguf> <schema.json> <prefix>...\n";
    return 2;
  }
  auto file = gguf::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::cerr << file.status().message() << "\n";
    return 1;
  }
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::cerr << tok.status().message() << "\n";
    return 1;
  }
  std::shared_ptr<const grammar::TokenTrie> trie = grammar::TokenTrie::Build(**tok);
  std::cout << "vocabulary " << (*tok)->n_vocab() << " tokens, tries " << trie->plain().nodes.size() << " + " << trie->other().nodes.size()
            << " nodes\n";
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  auto grammar = grammar::CompileJsonSchemaText(text.str(), {});
  if (!grammar.ok()) {
    std::cerr << grammar.status().message() << "\n";
    return 1;
  }
  for (int i = 3; i < argc; ++i) {
    const std::string prefix = argv[i];
    grammar::MatcherOptions options;
    grammar::GrammarMatcher matcher(*grammar, trie, options);
    if (!matcher.AcceptBytes(prefix).ok()) {
      std::cout << "prefix " << prefix << ": refused\n";
      continue;
    }
    auto t0 = Clock::now();
    auto mask = matcher.ComputeMask();
    auto t1 = Clock::now();
    const size_t allowed = mask.ok() ? (*mask)->Count() : 0;
    std::vector<double> warm;
    for (int rep = 0; rep < 9; ++rep) {
      grammar::GrammarMatcher fresh(*grammar, trie, options);
      (void)fresh.AcceptBytes(prefix);
      (void)fresh.ComputeMask();  // builds the automaton
      fresh.ClearMaskCache();
      auto w0 = Clock::now();
      (void)fresh.ComputeMask();
      warm.push_back(Us(w0, Clock::now()));
    }
    std::sort(warm.begin(), warm.end());
    std::cout << "prefix " << prefix << ": " << allowed << " tokens allowed; first mask "
              << Us(t0, t1) << " us; warm walk median " << warm[4] << " us (min " << warm[0]
              << ", max " << warm[8] << "); automaton " << matcher.dfa_states() << " states\n";
  }
  return 0;
}
