# A convolution's algorithm, timed once on a machine, is kept in the tuning
# cache (KILN_CACHE_DIR) and read by the next process instead of timing
# again: edited to favour one algorithm, the cache makes the next run take it.
# Run with -DKILN=<kiln binary> -DMODEL=<a CNN .onnx, batch 2> -DOUT=<directory>.
file(REMOVE_RECURSE ${OUT})
function(bench profile)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${OUT}/cache
                          ${KILN} bench ${MODEL} --batch 2 --runs 1 --profile ${OUT}/${profile}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln bench failed (${rc}):\n${out}${err}")
  endif()
  file(READ ${OUT}/${profile}/batch2/trace.json trace)
  set(trace "${trace}" PARENT_SCOPE)
endfunction()

bench(timed)
file(GLOB caches ${OUT}/cache/tuning-*.txt)
list(LENGTH caches count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one tuning cache file in ${OUT}/cache, found ${count}")
endif()
file(READ ${caches} timed)
if(NOT timed MATCHES "conv_algorithm t[0-9]+,[0-9,]+ direct:[0-9.e+-]+")
  message(FATAL_ERROR "the tuning cache holds no convolution's timings:\n${timed}")
endif()

# Every score 1, then the favoured algorithm's a billionth of that.
function(favour algorithm)
  string(REGEX REPLACE ":[0-9.e+-]+" ":1" scores "${timed}")
  string(REPLACE "${algorithm}:1" "${algorithm}:1e-09" scores "${scores}")
  file(WRITE ${caches} "${scores}")
endfunction()

favour(winograd2x2)
bench(winograd)
if(NOT trace MATCHES "\\(winograd 2x2\\)")
  message(FATAL_ERROR "with the cache favouring Winograd F(2x2), the run did not take it where it applies")
endif()
favour(direct)
bench(direct)
if(trace MATCHES "winograd")
  message(FATAL_ERROR "with the cache favouring oneDNN's direct kernel, a layer still ran by Winograd")
endif()
