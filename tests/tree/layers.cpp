// The tree's layers (docs/design.md §9): a file includes only files of its
// own layer or of the layers below it, and no header includes itself
// through others. Read from the source tree, so a new include that breaks
// the layering fails here, naming both files.

#define BOOST_TEST_MODULE tree_layers
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path source_dir{SYNCFAC_SOURCE_DIR};

/// The layer of a file (relative to the source tree), lowest first; -1 for
/// files outside the library.
int layer_of(const std::string& path) {
  if (path.rfind("runtime/base/", 0) == 0)
    return 0;
  static const std::vector<std::string> layers{"kernels/", "runtime/",
                                               "messages/", "actors/"};
  for (size_t i = 0; i < layers.size(); ++i)
    if (path.rfind(layers[i], 0) == 0)
      return static_cast<int>(i) + 1;
  return -1;
}

const char* layer_name(int layer) {
  static const char* names[] = {"runtime/base", "kernels", "runtime",
                                "messages", "actors"};
  return names[layer];
}

bool is_source(const fs::path& p) {
  auto ext = p.extension().string();
  return ext == ".hpp" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
}

/// Every library file and the project files it includes.
std::map<std::string, std::vector<std::string>> library_includes() {
  static const std::regex include{R"re(^\s*#\s*include\s*"([^"]+)")re"};
  std::map<std::string, std::vector<std::string>> result;
  for (auto dir : {"kernels", "runtime", "messages", "actors"}) {
    for (auto& e : fs::recursive_directory_iterator(source_dir / dir)) {
      if (!e.is_regular_file() || !is_source(e.path()))
        continue;
      auto rel = fs::relative(e.path(), source_dir).generic_string();
      auto& out = result[rel];
      std::ifstream in{e.path()};
      std::string line;
      std::smatch m;
      while (std::getline(in, line))
        if (std::regex_search(line, m, include)
            && fs::exists(source_dir / m[1].str()))
          out.push_back(m[1].str());
    }
  }
  return result;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_library_has_files_in_every_layer) {
  auto includes = library_includes();
  std::set<int> seen;
  for (auto& [file, _] : includes)
    seen.insert(layer_of(file));
  BOOST_TEST(seen.size() == 5u);
}

BOOST_AUTO_TEST_CASE(no_file_includes_a_layer_above_its_own) {
  std::vector<std::string> upward;
  for (auto& [file, targets] : library_includes())
    for (auto& target : targets)
      if (layer_of(target) > layer_of(file))
        upward.push_back(file + " (" + layer_name(layer_of(file))
                         + ") includes " + target + " ("
                         + layer_name(layer_of(target)) + ")");
  std::ostringstream msg;
  for (auto& u : upward)
    msg << "\n  " << u;
  BOOST_CHECK_MESSAGE(upward.empty(),
                      upward.size() << " includes go up a layer:" << msg.str());
}

BOOST_AUTO_TEST_CASE(no_header_includes_itself_through_others) {
  auto includes = library_includes();
  // Depth-first search over headers; a back edge is a cycle.
  std::map<std::string, int> mark; // 1: on the path, 2: done
  std::vector<std::string> path;
  std::vector<std::string> cycles;
  std::function<void(const std::string&)> visit = [&](const std::string& f) {
    mark[f] = 1;
    path.push_back(f);
    for (auto& t : includes[f]) {
      if (mark[t] == 1) {
        std::string c;
        for (auto it = std::find(path.begin(), path.end(), t);
             it != path.end(); ++it)
          c += *it + " -> ";
        cycles.push_back(c + t);
      } else if (mark[t] == 0) {
        visit(t);
      }
    }
    path.pop_back();
    mark[f] = 2;
  };
  for (auto& [file, _] : includes)
    if (mark[file] == 0)
      visit(file);
  std::ostringstream msg;
  for (auto& c : cycles)
    msg << "\n  " << c;
  BOOST_CHECK_MESSAGE(cycles.empty(),
                      cycles.size() << " include cycles:" << msg.str());
}
