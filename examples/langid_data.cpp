// Language identification of single words, the data of the sparse-gradient
// example (docs/models.md, "Sparse gradients end to end"): reads Debian's
// word lists (wamerican, wngerman, wfrench, wspanish, witalian,
// wportuguese, wdutch in /usr/share/dict), turns every word into a bag of
// hashed character n-grams (n = 1..4 of "<word>", FNV-1a into
// --vocabulary buckets), splits train/test deterministically by a hash of
// the word, and writes
//   - FILE.npz: x_train/x_test int32 [N, --bag] (indices, -1 padding),
//     or with --layout offsets the bags unpadded, x_train_indices (int32,
//     flat) and x_train_offsets (int64, N + 1), likewise for test;
//     y_train/y_test uint8 [N] (the language's position in --languages),
//   - the model description (--model_out): embedding_bag (mean) -> dense
//     -> softmax cross-entropy.
// Any program then trains it through the sync-replica runtime, where the
// embedding's gradient crosses the wire as a sparse push:
//
//   build/bin/langid_data --out langid.npz --model_out langid.json
//   build/bin/convnet_mnist_single --data langid.npz --model_file langid.json
//       --worker_replicas 3 --ps_tasks 2 --optimizer adam --steps 1500
//
// Words are lower-cased (German nouns would give their language away by
// case), words with an apostrophe dropped (English possessives), and a
// word found in two languages' lists dropped from both: it has no answer.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/config_option_adder.hpp>

#include "runtime/comma_list.hpp"
#include "runtime/data/npz.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model_builder.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;

namespace {

constexpr const char* program_name = "langid_data";

/// The Debian package and file of each language's word list.
const std::map<std::string, std::pair<const char*, const char*>> word_lists = {
  {"english", {"wamerican", "american-english"}},
  {"german", {"wngerman", "ngerman"}},
  {"french", {"wfrench", "french"}},
  {"spanish", {"wspanish", "spanish"}},
  {"italian", {"witalian", "italian"}},
  {"portuguese", {"wportuguese", "portuguese"}},
  {"dutch", {"wdutch", "dutch"}},
};

struct options : program_config {
  std::string dict_dir = "/usr/share/dict";
  std::string languages = "english,german,french,spanish,italian,"
                          "portuguese,dutch";
  int64_t words = 12000;
  int64_t vocabulary = 1 << 18;
  int64_t bag = 48;
  int64_t width = 32;
  int64_t test_percent = 20;
  std::string out = "langid.npz";
  std::string model_out = "langid.json";
  int64_t push_batch = 0;
  std::string layout = "rows";

  options() {
    caf::config_option_adder{custom_options_, "global"}
      .add(dict_dir, "dict_dir", "directory of the word lists")
      .add(languages, "languages", "comma-separated, of: english, german, "
                                   "french, spanish, italian, portuguese, "
                                   "dutch")
      .add(words, "words", "words per language at most (the same for all)")
      .add(vocabulary, "vocabulary", "n-gram hash buckets (embedding rows)")
      .add(bag, "bag", "n-grams per word at most (the bag's length)")
      .add(width, "width", "embedding width")
      .add(test_percent, "test_percent", "share of words held out (%)")
      .add(out, "out", "the .npz file to write")
      .add(model_out, "model_out", "the model description to write")
      .add(layout, "layout",
           "rows (x_train [N, bag], -1 padding) or offsets "
           "(x_train_indices, x_train_offsets; docs/models.md)")
      .add(push_batch, "push_batch",
           "also report the bytes of the table's sparse push for batches "
           "of this many training words (0: no report)");
    limit("words", at_least(10));
    limit("vocabulary", between(2, 1 << 24));
    limit("bag", at_least(1));
    limit("width", at_least(1));
    limit("test_percent", between(1, 90));
    limit("push_batch", at_least(0));
  }
};

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string lower(std::string word) {
  for (auto& c : word)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return word;
}

/// The hashed n-grams (n = 1..4, bytes) of "<word>", at most `bag`, in a
/// fixed order, padded with -1.
std::vector<int32_t> ngrams(const std::string& word, int64_t bag,
                            int64_t vocabulary) {
  std::string padded = "<" + word + ">";
  std::vector<int32_t> out;
  for (size_t n = 1; n <= 4; ++n)
    for (size_t i = 0; i + n <= padded.size(); ++i) {
      if (static_cast<int64_t>(out.size()) == bag)
        break;
      auto h = fnv1a(padded.substr(i, n), fnv1a(std::to_string(n)));
      out.push_back(static_cast<int32_t>(h % static_cast<uint64_t>(vocabulary)));
    }
  out.resize(static_cast<size_t>(bag), -1);
  return out;
}

int fail(const std::string& what) {
  std::cerr << program_name << ": " << what << "\n";
  return EXIT_FAILURE;
}

/// A vector's length as an array dimension.
template <class T>
int64_t n(const std::vector<T>& values) {
  return static_cast<int64_t>(values.size());
}

/// The bags of `rows` ([n, bag], -1 padding) without their padding, as
/// the offsets layout holds them: the indices one bag after the other, and
/// where each bag begins (n + 1 entries, the last the end).
void to_offsets(const std::vector<int32_t>& rows, int64_t bag,
                std::vector<int32_t>& indices, std::vector<int64_t>& offsets) {
  offsets.push_back(0);
  for (size_t start = 0; start < rows.size(); start += static_cast<size_t>(bag)) {
    for (int64_t j = 0; j < bag; ++j) {
      auto v = rows[start + static_cast<size_t>(j)];
      if (v >= 0)
        indices.push_back(v);
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
}

/// The longest bag among `rows` ([n, bag], -1 padding).
int64_t longest_bag(const std::vector<int32_t>& rows, int64_t bag) {
  int64_t longest = 0;
  for (size_t start = 0; start < rows.size(); start += static_cast<size_t>(bag))
    longest = std::max<int64_t>(
      longest, std::count_if(rows.begin() + static_cast<std::ptrdiff_t>(start),
                             rows.begin() + static_cast<std::ptrdiff_t>(start)
                               + bag,
                             [](int32_t v) { return v >= 0; }));
  return longest;
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  if (auto err = opts.parse_cli(argc, argv))
    return fail(render(err));
  if (opts.help_printed)
    return EXIT_SUCCESS;
  auto langs = comma_items(opts.languages);
  if (langs.size() < 2)
    return fail("--languages needs at least two languages, got '"
                + opts.languages + "'");
  if (opts.words < 10 || opts.bag < 1 || opts.vocabulary < 2
      || opts.vocabulary > (1 << 24) || opts.width < 1
      || opts.test_percent < 1 || opts.test_percent > 90)
    return fail("--words >= 10, --bag >= 1, --vocabulary in [2, 2^24], "
                "--width >= 1 and --test_percent in [1, 90] are needed");
  if (opts.layout != "rows" && opts.layout != "offsets")
    return fail("--layout: '" + opts.layout + "' is neither rows nor offsets");
  // Every language's words, lower-cased, without apostrophes.
  std::vector<std::set<std::string>> words(langs.size());
  std::map<std::string, int> seen_in;
  for (size_t k = 0; k < langs.size(); ++k) {
    auto it = word_lists.find(langs[k]);
    if (it == word_lists.end())
      return fail("--languages: unknown language '" + langs[k]
                  + "' (expected english, german, french, spanish, italian, "
                    "portuguese or dutch)");
    auto path = opts.dict_dir + "/" + it->second.second;
    std::ifstream in{path};
    if (!in)
      return fail("cannot read '" + path + "' (Debian's " + it->second.first
                  + " package; scripts/install-deps.sh installs it)");
    std::string line;
    while (std::getline(in, line)) {
      if (line.size() < 2 || line.find('\'') != std::string::npos)
        continue;
      words[k].insert(lower(line));
    }
    for (const auto& w : words[k])
      ++seen_in[w];
  }
  // The same number of words per language, a deterministic sample: the
  // words of a language in the order of their hashes.
  std::vector<std::vector<std::string>> picked(langs.size());
  size_t per_language = static_cast<size_t>(opts.words);
  for (size_t k = 0; k < langs.size(); ++k) {
    for (const auto& w : words[k])
      if (seen_in[w] == 1)
        picked[k].push_back(w);
    std::sort(picked[k].begin(), picked[k].end(),
              [](const std::string& a, const std::string& b) {
                return fnv1a(a, 7) < fnv1a(b, 7);
              });
    per_language = std::min(per_language, picked[k].size());
  }
  std::vector<int32_t> x_train, x_test;
  std::vector<uint8_t> y_train, y_test;
  for (size_t k = 0; k < langs.size(); ++k)
    for (size_t i = 0; i < per_language; ++i) {
      const auto& w = picked[k][i];
      auto bag = ngrams(w, opts.bag, opts.vocabulary);
      bool test = fnv1a(w, 11) % 100 < static_cast<uint64_t>(opts.test_percent);
      auto& x = test ? x_test : x_train;
      auto& y = test ? y_test : y_train;
      x.insert(x.end(), bag.begin(), bag.end());
      y.push_back(static_cast<uint8_t>(k));
    }
  auto n_train = static_cast<int64_t>(y_train.size());
  auto n_test = static_cast<int64_t>(y_test.size());
  std::map<std::string, npy_array> arrays{{"y_train", npy_of(y_train, {n(y_train)})},
                                          {"y_test", npy_of(y_test, {n(y_test)})}};
  // The model's input: the bag's length, or in the offsets layout the
  // longest bag of the file (what the reader pads every bag to).
  auto input_width = opts.bag;
  if (opts.layout == "rows") {
    arrays.emplace("x_train", npy_of(x_train, {n_train, opts.bag}));
    arrays.emplace("x_test", npy_of(x_test, {n_test, opts.bag}));
  } else {
    for (auto [name, rows] : {std::pair{"x_train", &x_train},
                              std::pair{"x_test", &x_test}}) {
      std::vector<int32_t> indices;
      std::vector<int64_t> offsets;
      to_offsets(*rows, opts.bag, indices, offsets);
      arrays.emplace(std::string{name} + "_indices",
                     npy_of(indices, {n(indices)}));
      arrays.emplace(std::string{name} + "_offsets",
                     npy_of(offsets, {n(offsets)}));
    }
    input_width = std::max(longest_bag(x_train, opts.bag),
                           longest_bag(x_test, opts.bag));
  }
  auto bytes = write_npz(arrays);
  std::ofstream out{opts.out, std::ios::binary | std::ios::trunc};
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out.flush())
    return fail("cannot write '" + opts.out + "'");
  auto desc = model_builder{"langid", {input_width}}
                .embedding_bag(opts.vocabulary, opts.width, bag_combiner::mean)
                .dense(static_cast<int64_t>(langs.size()))
                .build();
  if (!desc)
    return fail(render(desc.error()));
  std::ofstream model{opts.model_out, std::ios::trunc};
  model << desc->to_json();
  if (!model.flush())
    return fail("cannot write '" + opts.model_out + "'");
  if (opts.push_batch > 0 && opts.push_batch <= n_train) {
    // What a worker's device sends for the table (split_gradients in
    // actors/device_actor.cpp): the rows its batch touched, 8 bytes of
    // index and width floats each, against the whole table dense; over
    // consecutive batches of a fixed shuffle of the training words.
    std::vector<int64_t> order(static_cast<size_t>(n_train));
    for (int64_t i = 0; i < n_train; ++i)
      order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [](int64_t a, int64_t b) {
      return fnv1a(std::to_string(a), 3) < fnv1a(std::to_string(b), 3);
    });
    int64_t batches = 0;
    double rows = 0;
    for (int64_t start = 0; start + opts.push_batch <= n_train;
         start += opts.push_batch, ++batches) {
      std::set<int32_t> touched;
      for (int64_t k = start; k < start + opts.push_batch; ++k) {
        auto i = order[static_cast<size_t>(k)];
        for (int64_t j = 0; j < opts.bag; ++j) {
          auto v = x_train[static_cast<size_t>(i * opts.bag + j)];
          if (v >= 0)
            touched.insert(v);
        }
      }
      rows += static_cast<double>(touched.size());
    }
    auto mean_rows = rows / static_cast<double>(batches);
    auto sparse_bytes = mean_rows * (8.0 + 4.0 * static_cast<double>(opts.width));
    auto dense_bytes = 4.0 * static_cast<double>(opts.vocabulary * opts.width);
    std::cout << program_name << ": sparse push of the table, batches of "
              << opts.push_batch << ": " << mean_rows << " rows, "
              << sparse_bytes << " bytes (dense: " << dense_bytes
              << " bytes, " << dense_bytes / sparse_bytes << "x more), mean "
              << "over " << batches << " batches\n";
  }
  std::cout << program_name << ": " << langs.size() << " languages, "
            << per_language << " words each: " << n_train << " training and "
            << n_test << " test words, bags of up to " << opts.bag
            << " n-grams in " << opts.vocabulary << " buckets ("
            << opts.layout << ") -> " << opts.out
            << ", " << opts.model_out << "\n";
  return EXIT_SUCCESS;
}
