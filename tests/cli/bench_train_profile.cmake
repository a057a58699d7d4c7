# kiln bench-train --profile writes a summary of the timed steps that names
# the forward, backward and update ops of the compiled step, a Chrome trace
# and an HTML report titled by the model.
# Run with -DKILN=<kiln binary> -DOUT=<directory>.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${KILN} bench-train cnn --mode graph --batch 8 --steps 2 --warmup 1 --profile ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln bench-train failed (${rc}):\n${out}${err}")
endif()
if(NOT out MATCHES "profiled the 2 timed steps")
  message(FATAL_ERROR "kiln bench-train does not say what it profiled:\n${out}")
endif()
foreach(file profile.txt trace.json report.html)
  if(NOT EXISTS ${OUT}/${file})
    message(FATAL_ERROR "kiln bench-train --profile wrote no ${OUT}/${file}")
  endif()
endforeach()
file(READ ${OUT}/profile.txt summary)
foreach(op conv2d conv2d_weight_grad sgd_update)
  if(NOT summary MATCHES "${op}")
    message(FATAL_ERROR "the profile names no ${op}:\n${summary}")
  endif()
endforeach()
file(READ ${OUT}/report.html report)
if(NOT report MATCHES "kiln bench-train cnn, graph mode")
  message(FATAL_ERROR "the report is not titled by the model and mode")
endif()
