# sl_pkgconfig.cmake - shardload.pc, installed into <libdir>/pkgconfig.
#
# The prefix written in the file must be the one the package is installed into, and
# `cmake --install build --prefix DIR` (make install PREFIX=DIR) gives that only at install time.
# So cmake/shardload.pc.in is configured twice: here with everything but the prefix, then by an
# install(CODE) step with CMAKE_INSTALL_PREFIX as the install script sees it.

# sl_pc_lib_flags(<out> <library>): a library of a link line (a full path, a flag or a bare name)
# as -l flags, with -L when its folder is not one the linker searches anyway.
function(sl_pc_lib_flags out lib)
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    get_filename_component(name "${lib}" NAME_WE)
    string(REGEX REPLACE "^lib" "" name "${name}")
    set(flags "-l${name}")
    if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      set(flags "-L${dir};${flags}")
    endif()
  elseif(lib MATCHES "^-")
    set(flags "${lib}")
  else()
    set(flags "-l${lib}")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# Libs.private: what a static link of libshardload.a needs besides it (pkg-config --static).
set(sl_pc_libs "")
foreach(var JANSSON XXHASH ${SL_OPTIONAL_DEPS})
  if(DEFINED SL_HAVE_${var} AND NOT SL_HAVE_${var})   # the optional ones, when not built in
    continue()
  endif()
  if(SL_${var}_LIBRARY)                       # found by find_library (sl_find_dep's fallback)
    sl_pc_lib_flags(flags "${SL_${var}_LIBRARY}")
    list(APPEND sl_pc_libs ${flags})
  else()                                      # found by pkg-config
    foreach(dir IN LISTS ${var}_LIBRARY_DIRS)
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND sl_pc_libs "-L${dir}")
      endif()
    endforeach()
    foreach(lib IN LISTS ${var}_LIBRARIES)
      list(APPEND sl_pc_libs "-l${lib}")
    endforeach()
  endif()
endforeach()
if(SL_HAVE_MPI)
  foreach(lib IN LISTS MPI_C_LIBRARIES)
    sl_pc_lib_flags(flags "${lib}")
    list(APPEND sl_pc_libs ${flags})
  endforeach()
endif()
list(APPEND sl_pc_libs ${CMAKE_THREAD_LIBS_INIT})
foreach(lib IN LISTS CMAKE_DL_LIBS)
  list(APPEND sl_pc_libs "-l${lib}")
endforeach()
list(APPEND sl_pc_libs -lm)
list(REMOVE_DUPLICATES sl_pc_libs)
list(JOIN sl_pc_libs " " SL_PC_LIBS_PRIVATE)

foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(SL_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(SL_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
set(SL_PC_PREFIX "@SL_PC_PREFIX@")              # left for the install step
configure_file(${PROJECT_SOURCE_DIR}/cmake/shardload.pc.in ${PROJECT_BINARY_DIR}/shardload.pc.in @ONLY)

if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(sl_pc_dest "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(sl_pc_dest "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
# One generated file per prefix, so that two installs from one build tree do not race.
install(CODE "
  set(SL_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  string(MD5 sl_pc_key \"\${CMAKE_INSTALL_PREFIX}\")
  set(sl_pc \"${PROJECT_BINARY_DIR}/pkgconfig/\${sl_pc_key}/shardload.pc\")
  configure_file(\"${PROJECT_BINARY_DIR}/shardload.pc.in\" \"\${sl_pc}\" @ONLY)
  file(INSTALL DESTINATION \"${sl_pc_dest}\" TYPE FILE FILES \"\${sl_pc}\")
")
