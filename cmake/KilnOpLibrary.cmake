# kiln_add_op_library(NAME [PORTABLE] SOURCES a.cpp b.cpp ...) builds lib<NAME>.so, an
# op package Kiln loads with --plugin, KILN_PLUGIN_PATH, a serving
# repository's plugins/ folder or kiln::load_op_library. The package sees only
# kiln/plugin.h and the C ABI under it, and links nothing of Kiln: it loads
# into every Kiln release with the same plugin ABI version. Like Kiln itself,
# it is compiled for the building machine's CPU (-march=native) unless
# PORTABLE is given.
function(kiln_add_op_library name)
  cmake_parse_arguments(ARG "PORTABLE" "" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_op_library(${name} SOURCES ...): give the package's source files")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Kiln::plugin m)
  target_compile_features(${name} PRIVATE cxx_std_17)
  # Hidden symbols keep two packages' inline helpers apart; KILN_PLUGIN
  # exports the three entry points. Loops marked `omp simd` vectorize.
  set_target_properties(${name} PROPERTIES PREFIX "lib" CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${name} PRIVATE -fopenmp-simd -fno-math-errno)
  if(NOT ARG_PORTABLE)
    target_compile_options(${name} PRIVATE -march=native)
  endif()
  target_link_options(${name} PRIVATE -Wl,--no-undefined)
endfunction()
