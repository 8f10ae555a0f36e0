#include "common/cli_config.h"

#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config_file.h"

namespace colibri {
namespace {

// CLI11's hook for config files. CLI11 reports a bad file by the
// CLI::ConfigError its formatter throws (it catches it in CLI11_PARSE), so
// this is where a Status becomes that exception.
class ConfigFormatter : public CLI::Config {
 public:
  explicit ConfigFormatter(CLI::App* root) : root_(root) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string path = FilePath();
    const std::string text(std::istreambuf_iterator<char>(input), {});
    absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(text, path);
    if (!entries.ok()) throw CLI::ConfigError(std::string(entries.status().message()));
    std::vector<CLI::ConfigItem> items;
    for (const ConfigEntry& entry : *entries) {
      CLI::ConfigItem item;
      item.name = entry.key;
      item.inputs = entry.values;
      const CLI::App* target = root_;
      if (!entry.section.empty()) {
        target = FindSubcommand(entry.section);
        if (target == nullptr) {
          throw CLI::ConfigError(absl::StrCat(path, ":", entry.line, ": section [", entry.section,
                                              "] is not a subcommand of ", RootName()));
        }
        item.parents.push_back(entry.section);
      } else if (!HasOption(root_, entry.key)) {
        for (const CLI::App* sub : root_->get_subcommands()) {
          if (HasOption(sub, entry.key)) {
            target = sub;
            item.parents.push_back(sub->get_name());
            break;
          }
        }
      }
      if (!HasOption(target, entry.key)) {
        std::string where = target == root_ ? RootName() : target->get_name();
        if (target == root_ && !root_->get_subcommands().empty()) {
          where += " " + root_->get_subcommands().front()->get_name();
        }
        throw CLI::ConfigError(absl::StrCat(path, ":", entry.line, ": unknown key '", entry.key,
                                            "': ", where, " has no option --", entry.key));
      }
      items.push_back(std::move(item));
    }
    return items;
  }

 private:
  static bool HasOption(const CLI::App* app, const std::string& key) {
    return app->get_option_no_throw("--" + key) != nullptr;
  }

  const CLI::App* FindSubcommand(const std::string& name) const {
    for (const CLI::App* sub : root_->get_subcommands({})) {
      if (sub->get_name() == name) return sub;
    }
    return nullptr;
  }

  // The program's name without its folder (CLI11 names the root app argv[0]).
  std::string RootName() const {
    const std::string& name = root_->get_name();
    return name.substr(name.find_last_of('/') + 1);
  }

  std::string FilePath() const {
    const CLI::Option* option = root_->get_config_ptr();
    if (option == nullptr || option->count() == 0) return "config";
    return option->results().front();
  }

  CLI::App* const root_;
};

}  // namespace

void AddConfigFileOption(CLI::App* app) {
  app->set_config("--config", "",
                  "TOML file: long flag names as keys (see common/config_file.h); flags given "
                  "here win over the file");
  app->config_formatter(std::make_shared<ConfigFormatter>(app));
  app->allow_config_extras(CLI::config_extras_mode::error);
  for (CLI::App* sub : app->get_subcommands({})) sub->fallthrough();
}

}  // namespace colibri
