#include "runtime/data/npy.hpp"

#include <cctype>
#include <cstring>
#include <limits>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

template <class T>
T load(const uint8_t* p) noexcept {
  T x;
  std::memcpy(&x, p, sizeof(T)); // the files are little-endian, as is x86
  return x;
}

int64_t product(const std::vector<int64_t>& shape) noexcept {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

double element_as_double(npy_kind kind, int64_t item_size,
                         const uint8_t* p) noexcept;

int64_t element_as_integer(npy_kind kind, int64_t item_size,
                           const uint8_t* p) noexcept {
  if (kind == npy_kind::floating) {
    // NaN, Inf and values beyond int64 have no integer: the smallest one
    // stands for them (callers refuse it as out of range).
    auto d = element_as_double(kind, item_size, p);
    if (!(d > -9.2e18 && d < 9.2e18))
      return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(d);
  }
  bool s = kind == npy_kind::signed_int;
  switch (item_size) {
    // Each branch widened on its own: a ?: of int32_t and uint32_t would
    // be uint32_t, and -1 would read as 4294967295.
    case 1: return s ? int64_t{load<int8_t>(p)} : int64_t{load<uint8_t>(p)};
    case 2:
      return s ? int64_t{load<int16_t>(p)} : int64_t{load<uint16_t>(p)};
    case 4:
      return s ? int64_t{load<int32_t>(p)} : int64_t{load<uint32_t>(p)};
    default: {
      if (s)
        return load<int64_t>(p);
      auto u = load<uint64_t>(p);
      // Above int64's range: the largest value says "too large" anyway.
      return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
    }
  }
}

double element_as_double(npy_kind kind, int64_t item_size,
                         const uint8_t* p) noexcept {
  if (kind == npy_kind::floating)
    return item_size == 4 ? static_cast<double>(load<float>(p))
                          : load<double>(p);
  return static_cast<double>(element_as_integer(kind, item_size, p));
}

} // namespace

int64_t npy_view::element_count() const noexcept {
  return product(shape);
}

double npy_view::as_double(int64_t i) const noexcept {
  return element_as_double(kind, item_size, data + i * item_size);
}

int64_t npy_view::as_integer(int64_t i) const noexcept {
  return element_as_integer(kind, item_size, data + i * item_size);
}

int64_t npy_array::element_count() const noexcept {
  return product(shape);
}

double npy_array::as_double(int64_t i) const noexcept {
  return element_as_double(kind, item_size, data.data() + i * item_size);
}

int64_t npy_array::as_integer(int64_t i) const noexcept {
  return element_as_integer(kind, item_size, data.data() + i * item_size);
}

npy_view npy_array::view() const {
  return npy_view{kind, item_size, descr, shape, data.data()};
}

namespace {

/// A reader of the header's Python literal: {'key': value, ...} with
/// values a string, True/False, or a tuple of integers.
class header_parser {
public:
  header_parser(const std::string& text, const std::string& name)
    : text_(text), name_(name) {
  }

  caf::expected<npy_array> parse() {
    npy_array result;
    bool have_descr = false;
    bool have_order = false;
    bool have_shape = false;
    skip();
    if (!eat('{'))
      return bad("the header is not a dict literal");
    auto entry = [&]() -> caf::error {
      std::string key;
      if (!quoted(key))
        return bad("a header key is not a quoted string");
      skip();
      if (!eat(':'))
        return bad("no ':' after header key '" + key + "'");
      skip();
      if (key == "descr") {
        if (!quoted(result.descr))
          return bad("'descr' is not a string (structured dtypes are not "
                     "supported)");
        have_descr = true;
      } else if (key == "fortran_order") {
        bool fortran = false;
        if (word("True"))
          fortran = true;
        else if (!word("False"))
          return bad("'fortran_order' is not True or False");
        if (fortran)
          return bad("Fortran order is not supported (save a C-order array, "
                     "numpy.ascontiguousarray)");
        have_order = true;
      } else if (key == "shape") {
        if (auto err = tuple(result.shape))
          return err;
        have_shape = true;
      } else {
        return bad("unexpected header key '" + key + "'");
      }
      return caf::none;
    };
    if (auto err = items('}', "the header", entry))
      return err;
    skip();
    if (pos_ != text_.size())
      return bad("trailing characters after the header dict");
    if (!have_descr || !have_order || !have_shape)
      return bad("the header lacks "
                 + std::string{!have_descr   ? "'descr'"
                               : !have_order ? "'fortran_order'"
                                             : "'shape'"});
    if (auto err = dtype(result))
      return err;
    return result;
  }

private:
  caf::error bad(const std::string& what) const {
    return make_error(ec::bad_data, name_ + ": " + what);
  }

  void skip() {
    while (pos_ < text_.size()
           && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }

  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool word(const char* w) {
    auto n = std::strlen(w);
    if (text_.compare(pos_, n, w) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  bool quoted(std::string& out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return false;
    char q = text_[pos_++];
    auto end = text_.find(q, pos_);
    if (end == std::string::npos || end - pos_ > 64)
      return false;
    out = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }

  /// The items of a dict or a tuple up to `close` (the opening eaten),
  /// each read by `item`, comma-separated with an optional trailing comma
  /// as Python writes them; `where` names the literal in a refusal.
  template <class Item>
  caf::error items(char close, const std::string& where, Item& item) {
    for (;;) {
      skip();
      if (eat(close))
        return caf::none;
      if (auto err = item())
        return err;
      skip();
      if (eat(','))
        continue;
      skip();
      if (eat(close))
        return caf::none;
      return bad(std::string{"expected ',' or '"} + close + "' in " + where);
    }
  }

  caf::error tuple(std::vector<int64_t>& dims) {
    if (!eat('('))
      return bad("'shape' is not a tuple");
    auto dim = [&]() -> caf::error {
      if (pos_ >= text_.size()
          || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
        return bad("'shape' holds something other than non-negative "
                   "integers");
      int64_t d = 0;
      while (pos_ < text_.size()
             && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        d = d * 10 + (text_[pos_++] - '0');
        if (d > max_npy_elements)
          return bad("a dimension of 'shape' is larger than "
                     + std::to_string(max_npy_elements));
      }
      if (eat('L')) { // Python 2's long suffix
      }
      dims.push_back(d);
      if (dims.size() > 8)
        return bad("'shape' has more than 8 dimensions");
      return caf::none;
    };
    if (auto err = items(')', "'shape'", dim))
      return err;
    int64_t n = 1;
    for (auto d : dims) {
      if (d != 0 && n > max_npy_elements / d)
        return bad("'shape' has more than " + std::to_string(max_npy_elements)
                   + " elements");
      n *= d;
    }
    return caf::none;
  }

  caf::error dtype(npy_array& x) const {
    const auto& d = x.descr;
    auto refuse = [&] {
      return bad("dtype '" + d
                 + "' is not supported (expected little-endian integers "
                   "<i1..<i8, <u1..<u8, or floats <f4, <f8)");
    };
    if (d.size() < 3)
      return refuse();
    char order = d[0];
    char kind = d[1];
    auto size_text = d.substr(2);
    if (size_text != "1" && size_text != "2" && size_text != "4"
        && size_text != "8")
      return refuse();
    x.item_size = size_text[0] - '0';
    // '|' is "not applicable" (one byte); '=' is native, little-endian here.
    bool little = order == '<' || order == '=' || (order == '|' && x.item_size == 1);
    if (order == '>' && x.item_size > 1)
      return bad("dtype '" + d + "' is big-endian (save with "
                                 "astype('<" + std::string(1, kind) + size_text
                 + "'))");
    if (!little && !(order == '>' && x.item_size == 1))
      return refuse();
    switch (kind) {
      case 'i': x.kind = npy_kind::signed_int; break;
      case 'u': x.kind = npy_kind::unsigned_int; break;
      case 'f':
        if (x.item_size != 4 && x.item_size != 8)
          return refuse();
        x.kind = npy_kind::floating;
        break;
      case 'b':
        if (x.item_size != 1)
          return refuse();
        x.kind = npy_kind::unsigned_int; // booleans are bytes 0 and 1
        break;
      default: return refuse();
    }
    return caf::none;
  }

  const std::string& text_;
  const std::string& name_;
  size_t pos_ = 0;
};

} // namespace

caf::expected<npy_array> parse_npy(const uint8_t* bytes, size_t size,
                                   const std::string& name) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::bad_data, name + ": " + what);
  };
  static const uint8_t magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(bytes, magic, sizeof(magic)) != 0)
    return bad("not a .npy file (no \\x93NUMPY magic)");
  auto major = bytes[6];
  size_t header_len = 0;
  size_t header_at = 0;
  if (major == 1) {
    header_len = static_cast<size_t>(bytes[8]) | (size_t{bytes[9]} << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return bad("truncated header");
    header_len = static_cast<size_t>(bytes[8]) | (size_t{bytes[9]} << 8)
                 | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    header_at = 12;
  } else {
    return bad("format version " + std::to_string(major) + "."
               + std::to_string(bytes[7])
               + " is not supported (expected 1.0, 2.0 or 3.0)");
  }
  if (header_len > size - header_at)
    return bad("truncated header: it claims " + std::to_string(header_len)
               + " bytes, the file has " + std::to_string(size - header_at)
               + " after the preamble");
  if (header_len > (size_t{1} << 20))
    return bad("header of " + std::to_string(header_len)
               + " bytes is implausibly large");
  std::string header(reinterpret_cast<const char*>(bytes + header_at),
                     header_len);
  // numpy pads the header with spaces and ends it with a newline.
  if (!header.empty() && header.back() == '\n')
    header.pop_back();
  for (unsigned char c : header)
    if (c < 0x20 || c > 0x7e)
      return bad("the header holds a non-printable byte");
  header_parser parser{header, name};
  auto result = parser.parse();
  if (!result)
    return result;
  auto payload_at = header_at + header_len;
  auto want = static_cast<uint64_t>(result->element_count())
              * static_cast<uint64_t>(result->item_size);
  auto have = static_cast<uint64_t>(size - payload_at);
  if (have < want)
    return bad("truncated: shape " + std::to_string(result->element_count())
               + " elements of " + std::to_string(result->item_size)
               + " bytes need " + std::to_string(want) + " bytes of data, "
               + std::to_string(have) + " are there");
  if (have > want)
    return bad(std::to_string(have - want)
               + " bytes of trailing data after the elements");
  result->data.assign(bytes + payload_at, bytes + size);
  return result;
}

std::vector<uint8_t> write_npy(const npy_array& x) {
  std::string header = "{'descr': '" + x.descr
                       + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < x.shape.size(); ++i)
    header += (i > 0 ? ", " : "") + std::to_string(x.shape[i]);
  if (x.shape.size() == 1)
    header += ","; // Python's one-element tuple
  header += "), }";
  // Pad so that the data starts at a multiple of 64, as numpy does.
  auto total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(header.size() & 0xff));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), x.data.begin(), x.data.end());
  return out;
}

} // namespace syncfac
