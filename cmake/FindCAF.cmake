# FindCAF — locates the C++ Actor Framework as Debian's libcaf-dev 0.17 ships
# it (headers and shared libraries, no CMake or pkg-config files).
#
# Components: core io openssl. Imported targets: CAF::core, CAF::io,
# CAF::openssl. Result variables: CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR.

find_path(CAF_INCLUDE_DIR NAMES caf/all.hpp caf/config.hpp
          HINTS ${CAF_ROOT}/include)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1"
         _caf_version_number "${_caf_version_line}")
  if(_caf_version_number)
    math(EXPR _caf_major "${_caf_version_number} / 10000")
    math(EXPR _caf_minor "(${_caf_version_number} / 100) % 100")
    math(EXPR _caf_patch "${_caf_version_number} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

if(NOT CAF_FIND_COMPONENTS)
  set(CAF_FIND_COMPONENTS core io)
endif()

find_package(Threads QUIET)
foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${_comp}_LIBRARY NAMES caf_${_comp}
               HINTS ${CAF_ROOT}/lib)
  if(CAF_${_comp}_LIBRARY)
    set(CAF_${_comp}_FOUND TRUE)
  else()
    set(CAF_${_comp}_FOUND FALSE)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)

if(CAF_FOUND)
  if(CAF_core_FOUND AND NOT TARGET CAF::core)
    add_library(CAF::core SHARED IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_core_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(CAF_io_FOUND AND NOT TARGET CAF::io)
    add_library(CAF::io SHARED IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_io_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_openssl_FOUND AND NOT TARGET CAF::openssl)
    find_package(OpenSSL QUIET)
    add_library(CAF::openssl SHARED IMPORTED)
    set(_caf_openssl_deps CAF::io)
    if(OpenSSL_FOUND)
      list(APPEND _caf_openssl_deps OpenSSL::SSL OpenSSL::Crypto)
    endif()
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_openssl_LIBRARY}"
      INTERFACE_LINK_LIBRARIES "${_caf_openssl_deps}")
  endif()
endif()

mark_as_advanced(CAF_INCLUDE_DIR CAF_core_LIBRARY CAF_io_LIBRARY
                 CAF_openssl_LIBRARY)
