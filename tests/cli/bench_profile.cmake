# kiln bench --profile writes, for each batch size, a summary that names the
# kernels that ran, a Chrome trace and an HTML report; with --shape, one set
# in a folder named by the shapes.
# Run with -DKILN=<kiln binary> -DMODEL=<a CNN .onnx> -DOUT=<directory>.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${KILN} bench ${MODEL} --batch 1,2 --runs 2 --profile ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln bench failed (${rc}):\n${out}${err}")
endif()
foreach(batch 1 2)
  foreach(file profile.txt trace.json report.html)
    if(NOT EXISTS ${OUT}/batch${batch}/${file})
      message(FATAL_ERROR "kiln bench --profile wrote no ${OUT}/batch${batch}/${file}")
    endif()
  endforeach()
  file(READ ${OUT}/batch${batch}/profile.txt summary)
  if(NOT summary MATCHES "conv2d")
    message(FATAL_ERROR "batch ${batch}: the profile names no convolution:\n${summary}")
  endif()
endforeach()

set(shape input=1..3x1x28x28)
execute_process(COMMAND ${KILN} bench ${MODEL} --shape ${shape} --runs 3 --profile ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln bench --shape failed (${rc}):\n${out}${err}")
endif()
file(READ ${OUT}/${shape}/profile.txt summary)
if(NOT summary MATCHES "conv2d")
  message(FATAL_ERROR "--shape ${shape}: the profile names no convolution:\n${summary}")
endif()
file(READ ${OUT}/${shape}/report.html report)
if(NOT report MATCHES "kiln bench, ${shape}")
  message(FATAL_ERROR "--shape ${shape}: the report is not titled by the shapes")
endif()
