// syncfac-launch: starts every task of a cluster file as a process on this
// machine (docs/cluster.md). The work is in runtime/launch/launcher.cpp.

#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/launch/launcher.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return syncfac::launch_main(args, std::cout, std::cerr,
                              ::isatty(STDOUT_FILENO) != 0);
}
