# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DCXX_COMPILER=...
#       -P own_model.cmake
#
# Installs BUILD_DIR into WORK_DIR/prefix, builds examples/own_model (a
# model defined in code with model_builder) against that prefix alone in
# WORK_DIR/build, and trains it: it must learn the synthetic set.

set(test_name own_model)
include("${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake")
require_installed(include/syncfac/runtime/model_builder.hpp
                  include/syncfac/runtime/model_description.hpp
                  include/syncfac/runtime/model_file.hpp)

build_installed_example(own_model)
string(FIND "${step_output}" "${prefix}/include/syncfac" at_prefix)
string(FIND "${step_output}" "-I${SOURCE_DIR} " in_tree)
if(at_prefix EQUAL -1 OR NOT in_tree EQUAL -1)
  message(FATAL_ERROR "own_model: the build does not use only the installed "
                      "headers:\n${step_output}")
endif()

step("train own_model" "${build}/own_model" --steps 150)
message(STATUS "${step_output}")
# Its layers are its own (hidden/weights: the builder's name), K-FAC's
# registration is not asked for here, and it must learn: accuracy > 0.6.
string(REGEX MATCH "test accuracy ([0-9.]+) after ([0-9]+) steps" found
       "${step_output}")
if(NOT found)
  message(FATAL_ERROR "own_model: no accuracy line:\n${step_output}")
endif()
if(CMAKE_MATCH_1 LESS 0.6 OR NOT CMAKE_MATCH_2 EQUAL 150)
  message(FATAL_ERROR "own_model: accuracy ${CMAKE_MATCH_1} after "
                      "${CMAKE_MATCH_2} steps (expected > 0.6 after 150)")
endif()
step("own_model --optimizer kfac" "${build}/own_model" --steps 40
     --optimizer kfac --learning_rate 0.0003)
string(FIND "${step_output}" "test accuracy" kfac_ran)
if(kfac_ran EQUAL -1)
  message(FATAL_ERROR "own_model: K-FAC run printed no accuracy:\n"
                      "${step_output}")
endif()
message(STATUS "own_model: the installed package builds and trains a "
               "model defined in code")
