#include "actors/fatal_exception.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <system_error>

#include "runtime/exit_codes.hpp"

namespace syncfac {

std::string exception_text(std::exception_ptr x) {
  try {
    std::rethrow_exception(x);
  } catch (const std::bad_alloc&) {
    return "out of memory (std::bad_alloc)";
  } catch (const std::system_error& err) {
    return std::string{"std::system_error: "} + err.what();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

void end_program_of_exception(const char* role, std::exception_ptr x) {
  // fprintf of the exception's own text: nothing is allocated on the way,
  // and the exception may be bad_alloc.
  const char* kind = "";
  const char* what = "an exception of unknown type";
  try {
    std::rethrow_exception(x);
  } catch (const std::bad_alloc& err) {
    kind = "out of memory: ";
    what = err.what();
  } catch (const std::system_error& err) {
    kind = "std::system_error: ";
    what = err.what();
  } catch (const std::exception& err) {
    what = err.what();
  } catch (...) {
  }
  std::fprintf(stderr, "%s: the %s actor died of %s%s; the run cannot go on\n",
               program_invocation_short_name, role, kind, what);
  std::fflush(stderr);
  std::_Exit(exit_codes::failure);
}

} // namespace syncfac
