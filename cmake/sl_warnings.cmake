# Fixed warning set (STYLE.md rule 15). SL_WERROR=ON in CI.
function(sl_apply_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wcast-qual
    -Wpointer-arith -Wvla -Wformat=2 -Wundef -Wswitch-enum)
  if(SL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
