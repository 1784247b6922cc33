# Git hash for `examoe --version`; "unknown" outside a git checkout.
set(EXAMOE_GIT_HASH "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _h
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _r)
  if(_r EQUAL 0 AND _h)
    set(EXAMOE_GIT_HASH ${_h})
  endif()
endif()

# Re-run the configure step when HEAD moves (a commit, a checkout), so the
# hash in `examoe --version`, the bench JSON and a checkpoint's created_by
# names the commit that was built, not the one that was configured.
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --absolute-git-dir
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _gitdir
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _r)
  if(_r EQUAL 0 AND EXISTS "${_gitdir}/HEAD")
    set(_deps "${_gitdir}/HEAD")
    # Branch refs live in the common directory (a worktree's own has HEAD only).
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-common-dir
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _common
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    get_filename_component(_common "${_common}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
    execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _ref
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_ref AND EXISTS "${_common}/${_ref}")
      list(APPEND _deps "${_common}/${_ref}")
    endif()
    if(EXISTS "${_common}/packed-refs")
      list(APPEND _deps "${_common}/packed-refs")
    endif()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_deps})
  endif()
endif()
