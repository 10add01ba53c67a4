# SL_SANITIZE=address,undefined builds everything with those sanitizers and makes UBSan fatal.
if(SL_SANITIZE)
  set(SL_SAN_FLAGS "-fsanitize=${SL_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all")
  set(CMAKE_C_FLAGS "${CMAKE_C_FLAGS} ${SL_SAN_FLAGS}")
  set(CMAKE_EXE_LINKER_FLAGS "${CMAKE_EXE_LINKER_FLAGS} ${SL_SAN_FLAGS}")
endif()
