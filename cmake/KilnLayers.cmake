# Builds libkiln from one object library per layer (tools/layers.txt), each
# compiled against an include folder of its own that holds the headers it
# may include and, in place of every other header of the tree, one that stops
# the build naming the rule it breaks. A wrong-way include thus fails to
# compile, in the file that has it.
#
#   kiln_add_layers(TARGET kiln DEPS <interface target with the libraries> EXCEPT <layers>)
#       libkiln: every layer but those EXCEPT names
#   kiln_add_layer_library(TARGET kiln_serve LAYER serve LINK kiln DEPS <targets>)
#       a layer as a shared library of its own, linking LINK publicly

function(kiln_layer_table out_layers)
  file(STRINGS ${PROJECT_SOURCE_DIR}/tools/layers.txt lines)
  set(layers "")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line STREQUAL "" OR line MATCHES "^#")
      continue()
    endif()
    string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
    list(POP_FRONT fields name)
    if(name MATCHES "^!(.*)")
      set(KILN_FORBIDDEN_${CMAKE_MATCH_1} ${fields} PARENT_SCOPE)
      continue()
    endif()
    list(POP_FRONT fields rank)
    list(APPEND layers ${name})
    set(KILN_RANK_${name} ${rank} PARENT_SCOPE)
    list(REMOVE_ITEM fields "-")
    set(KILN_HEADERS_${name} ${fields} PARENT_SCOPE)
  endforeach()
  set(${out_layers} ${layers} PARENT_SCOPE)
endfunction()

# The layer a header belongs to ("kiln/nn/layers.h" -> nn, "graph/ir.h" -> graph,
# "backends/cpu/passes/x.h" -> backends/cpu/passes: a layer's folder may sit
# inside another's).
function(kiln_header_layer include layers out)
  set(result "")
  if(include MATCHES "^kiln/([^/.]+)")
    foreach(layer IN LISTS layers)
      if(CMAKE_MATCH_1 IN_LIST KILN_HEADERS_${layer})
        set(result ${layer})
      endif()
    endforeach()
  else()  # the layer whose folder holds it: the longest match (backends/cpu/passes before backends)
    set(longest 0)
    foreach(layer IN LISTS layers)
      string(LENGTH "${layer}" length)
      string(FIND "${include}" "${layer}/" at)
      if(at EQUAL 0 AND length GREATER longest)
        set(result ${layer})
        set(longest ${length})
      endif()
    endforeach()
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(kiln_add_layers)
  cmake_parse_arguments(ARG "" "TARGET;DEPS" "EXCEPT" ${ARGN})
  kiln_layer_table(layers)
  set(KILN_ALL_LAYERS ${layers} PARENT_SCOPE)
  set(KILN_ALL_LAYERS ${layers})
  # Every header of the tree, as it is included: kiln/tensor.h, graph/ir.h.
  file(GLOB_RECURSE public RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/kiln/*.h)
  file(GLOB_RECURSE private RELATIVE ${PROJECT_SOURCE_DIR}/src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.h)
  set(objects "")
  foreach(layer IN LISTS layers)
    kiln_layer_id(${layer} id)
    set(dir ${CMAKE_BINARY_DIR}/layers/${id})
    foreach(header IN LISTS public private)
      if(header IN_LIST public)
        set(real ${PROJECT_SOURCE_DIR}/include/${header})
      else()
        set(real ${PROJECT_SOURCE_DIR}/src/${header})
      endif()
      kiln_header_layer(${header} "${layers}" owner)
      if(owner STREQUAL "")  # kiln/kiln.h, which includes everything
        set(content "#error \"${header} includes every layer; a file of layer ${layer} includes the headers it needs\"\n")
      elseif(header IN_LIST KILN_FORBIDDEN_${layer})
        set(content "#error \"layer ${layer} must not include ${header} (tools/layers.txt): kernels compute, they do not call ops or record gradients again\"\n")
      elseif(KILN_RANK_${owner} GREATER KILN_RANK_${layer})
        set(content "#error \"layer ${layer} must not include ${header}: ${owner} is a layer above it (tools/layers.txt); move the code down or give ${layer} a hook that ${owner} installs\"\n")
      else()
        set(content "#include \"${real}\"\n")
      endif()
      file(CONFIGURE OUTPUT ${dir}/${header} CONTENT "${content}" @ONLY)
    endforeach()
    if(layer IN_LIST ARG_EXCEPT)
      continue()
    endif()
    kiln_layer_objects(${layer} ${ARG_DEPS})
    list(APPEND objects $<TARGET_OBJECTS:kiln_layer_${id}>)
  endforeach()
  add_library(${ARG_TARGET} SHARED ${objects})
  set(KILN_LAYERS ${layers} PARENT_SCOPE)
endfunction()

# A layer's name as a target and folder name: backends/cpu/passes -> backends_cpu_passes.
function(kiln_layer_id layer out)
  string(REPLACE "/" "_" id "${layer}")
  set(${out} ${id} PARENT_SCOPE)
endfunction()

# The object library kiln_layer_<id>, compiled against the layer's own include
# folder, from the sources (.cpp, and .cu where CUDA is enabled) in its folder
# but not in a layer folder inside it.
function(kiln_layer_objects layer deps)
  kiln_layer_id(${layer} id)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.cpp)
  if(CMAKE_CUDA_COMPILER)  # CUDA sources: only in the CUDA backend's layer, built when CUDA is on
    file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.cu)
    list(APPEND sources ${cuda_sources})
  endif()
  foreach(other IN LISTS KILN_ALL_LAYERS)
    if(NOT other STREQUAL layer AND other MATCHES "^${layer}/")
      list(FILTER sources EXCLUDE REGEX "^${PROJECT_SOURCE_DIR}/src/${other}/")
    endif()
  endforeach()
  add_library(kiln_layer_${id} OBJECT ${sources})
  set_target_properties(kiln_layer_${id} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(kiln_layer_${id} PRIVATE ${CMAKE_BINARY_DIR}/layers/${id})
  target_link_libraries(kiln_layer_${id} PRIVATE ${deps})
endfunction()

# A shared library of its own from one or more layers (LAYER a [b ...]).
function(kiln_add_layer_library)
  cmake_parse_arguments(ARG "" "TARGET" "LAYER;LINK;DEPS" ${ARGN})
  set(objects "")
  foreach(layer IN LISTS ARG_LAYER)
    kiln_layer_objects(${layer} "${ARG_DEPS};${ARG_LINK}")
    kiln_layer_id(${layer} id)
    list(APPEND objects $<TARGET_OBJECTS:kiln_layer_${id}>)
  endforeach()
  add_library(${ARG_TARGET} SHARED ${objects})
  target_link_libraries(${ARG_TARGET} PUBLIC ${ARG_LINK} PRIVATE ${ARG_DEPS})
endfunction()

# A file's text as a C++ string, `const char* const kiln::embedded::NAME`,
# compiled into TARGET (source that a library compiles at run time). The
# build configures again when the file changes.
function(kiln_embed_text target file name output)
  file(READ ${file} text)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  file(CONFIGURE OUTPUT ${output} CONTENT
    "// Generated from ${file} by kiln_embed_text (cmake/KilnLayers.cmake).\nnamespace kiln::embedded {\nextern const char* const ${name};\nconst char* const ${name} = R\"kiln_text(${text})kiln_text\";\n}\n"
    @ONLY)
  target_sources(${target} PRIVATE ${output})
endfunction()
