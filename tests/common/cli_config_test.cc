#include "common/cli_config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri {
namespace {

using ::testing::HasSubstr;

// A command line shaped like the binaries': root options, a subcommand with a
// required option, a flag and a list.
struct Flags {
  std::string address = "default:1";
  std::string model;
  int threads = 1;
  bool insecure = false;
  std::vector<std::string> nodes;
  double temp = 0.8;
};

class CliConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/colibri_cli_config_XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  // Parses `args` (after the program name); the error message on failure.
  bool Parse(std::vector<std::string> args, Flags* flags, std::string* error) {
    CLI::App app{"test"};
    app.add_option("--address", flags->address);
    CLI::App* serve = app.add_subcommand("serve");
    serve->add_option("--model,-m", flags->model)->required();
    serve->add_option("--threads", flags->threads)->check(CLI::Range(1, 8));
    serve->add_flag("--insecure", flags->insecure);
    serve->add_option("--nodes", flags->nodes)->delimiter(',');
    CLI::App* generate = app.add_subcommand("generate");
    generate->add_option("--temp", flags->temp);
    app.require_subcommand(1);
    AddConfigFileOption(&app);
    args.insert(args.begin(), "prog");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      *error = e.what();
      return false;
    }
    return true;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(CliConfigTest, FileFillsOptionsOfRootAndSubcommand) {
  const std::string path = WriteFile("a.toml",
                                     "address = \"coord:7070\"\n"
                                     "model = \"/m.gguf\"\n"
                                     "threads = 4\n"
                                     "insecure = true\n"
                                     "nodes = [\"n1:1\", \"n2:2\"]\n");
  Flags flags;
  std::string error;
  ASSERT_TRUE(Parse({"serve", "--config", path}, &flags, &error)) << error;
  EXPECT_EQ(flags.address, "coord:7070");
  EXPECT_EQ(flags.model, "/m.gguf");
  EXPECT_EQ(flags.threads, 4);
  EXPECT_TRUE(flags.insecure);
  EXPECT_THAT(flags.nodes, ::testing::ElementsAre("n1:1", "n2:2"));
}

TEST_F(CliConfigTest, FlagsOverrideTheFile) {
  const std::string path = WriteFile("a.toml",
                                     "address = \"coord:7070\"\n"
                                     "model = \"/m.gguf\"\n"
                                     "threads = 4\n"
                                     "nodes = \"n1:1,n2:2\"\n");
  Flags flags;
  std::string error;
  ASSERT_TRUE(
      Parse({"--address", "other:1", "serve", "--config", path, "--threads", "2", "--nodes", "x:9"},
            &flags, &error))
      << error;
  EXPECT_EQ(flags.address, "other:1");
  EXPECT_EQ(flags.threads, 2);
  EXPECT_THAT(flags.nodes, ::testing::ElementsAre("x:9"));
  EXPECT_EQ(flags.model, "/m.gguf");
}

TEST_F(CliConfigTest, ConfigBeforeTheSubcommandWorksToo) {
  const std::string path = WriteFile("a.toml", "model = \"/m.gguf\"\n");
  Flags flags;
  std::string error;
  ASSERT_TRUE(Parse({"--config", path, "serve"}, &flags, &error)) << error;
  EXPECT_EQ(flags.model, "/m.gguf");
}

TEST_F(CliConfigTest, UnknownKeyErrorNamesKeyAndLine) {
  const std::string path = WriteFile("a.toml",
                                     "# comment\n"
                                     "model = \"/m.gguf\"\n"
                                     "thread = 4\n");
  Flags flags;
  std::string error;
  ASSERT_FALSE(Parse({"serve", "--config", path}, &flags, &error));
  EXPECT_THAT(error, HasSubstr(path + ":3: unknown key 'thread'"));
  EXPECT_THAT(error, HasSubstr("prog serve has no option --thread"));
}

TEST_F(CliConfigTest, KeyOfAnotherSubcommandIsUnknown) {
  const std::string path = WriteFile("a.toml", "model = \"/m.gguf\"\ntemp = 0.1\n");
  Flags flags;
  std::string error;
  ASSERT_FALSE(Parse({"serve", "--config", path}, &flags, &error));
  EXPECT_THAT(error, HasSubstr(":2: unknown key 'temp'"));
}

TEST_F(CliConfigTest, SectionsNameSubcommands) {
  const std::string good = WriteFile("good.toml", "[generate]\ntemp = 0.25\n");
  Flags flags;
  std::string error;
  ASSERT_TRUE(Parse({"--config", good, "generate"}, &flags, &error)) << error;
  EXPECT_DOUBLE_EQ(flags.temp, 0.25);

  const std::string bad = WriteFile("bad.toml", "\n[generat]\ntemp = 0.25\n");
  ASSERT_FALSE(Parse({"--config", bad, "generate"}, &flags, &error));
  EXPECT_THAT(error, HasSubstr(":3: section [generat] is not a subcommand of prog"));

  const std::string wrong_key = WriteFile("wrong.toml", "[generate]\nmodel = \"x\"\n");
  ASSERT_FALSE(Parse({"--config", wrong_key, "generate"}, &flags, &error));
  EXPECT_THAT(error, HasSubstr(":2: unknown key 'model': generate has no option --model"));
}

TEST_F(CliConfigTest, ValuesGoThroughTheOptionsChecks) {
  const std::string path = WriteFile("a.toml", "model = \"/m.gguf\"\nthreads = 99\n");
  Flags flags;
  std::string error;
  ASSERT_FALSE(Parse({"serve", "--config", path}, &flags, &error));
  EXPECT_THAT(error, HasSubstr("99"));
}

TEST_F(CliConfigTest, SyntaxErrorAndMissingFileFail) {
  const std::string path = WriteFile("a.toml", "model = /m.gguf\n");
  Flags flags;
  std::string error;
  ASSERT_FALSE(Parse({"serve", "--config", path}, &flags, &error));
  EXPECT_THAT(error, HasSubstr(path + ":1: key 'model'"));
  ASSERT_FALSE(Parse({"serve", "--config", dir_ + "/missing.toml"}, &flags, &error));
  EXPECT_THAT(error, HasSubstr("missing.toml"));
}

TEST_F(CliConfigTest, RequiredOptionStillRequiredWithoutFile) {
  Flags flags;
  std::string error;
  ASSERT_FALSE(Parse({"serve"}, &flags, &error));
  EXPECT_THAT(error, HasSubstr("--model"));
}

}  // namespace
}  // namespace colibri
