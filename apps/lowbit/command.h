// Subcommand registry for the lowbit CLI. Each cmd_*.cpp file registers one subcommand with
// LOWBIT_COMMAND(name, description, setup): `setup` adds the options and sets a callback on the CLI::App.
// Adding a command is a new file; main.cpp never changes.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace lowbit::app {

struct CommandDef {
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
  int order;  // position in --help
};

std::vector<CommandDef>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string description, std::function<void(CLI::App&)> setup,
                   int order) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup), order});
  }
};

// Exit code a subcommand callback wants (set via set_exit_code), default 0.
void set_exit_code(int code);
int exit_code();

}  // namespace lowbit::app

#define LOWBIT_CONCAT2(a, b) a##b
#define LOWBIT_CONCAT(a, b) LOWBIT_CONCAT2(a, b)
#define LOWBIT_COMMAND(name, order, description, setup) \
  static ::lowbit::app::CommandRegistrar LOWBIT_CONCAT(lowbit_cmd_, __LINE__)(name, description, setup, order)
