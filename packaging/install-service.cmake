# Installs sipd.service and the default configuration (CMakeLists.txt runs
# this at `cmake --install` time, so the paths follow the prefix given then):
#   <prefix>/lib/systemd/system/sipd.service (systemd reads /usr/lib/... and
#   /usr/local/lib/systemd/system), ExecStart naming <prefix>/bin/sipd;
#   <sysconfdir>/sip/sip.yaml, where sysconfdir is /etc for the prefix /usr
#   and <prefix>/etc otherwise. An existing sip.yaml is left as it is.
# Expects SIP_SOURCE_DIR (the source tree).
set(_prefix "${CMAKE_INSTALL_PREFIX}")
if(_prefix STREQUAL "/usr")
  set(SYSCONFDIR "/etc")
else()
  set(SYSCONFDIR "${_prefix}/etc")
endif()
set(BINDIR "${_prefix}/bin")
set(DOCDIR "${_prefix}/share/doc/sip")

set(_unit "$ENV{DESTDIR}${_prefix}/lib/systemd/system/sipd.service")
message(STATUS "Installing: ${_unit}")
configure_file("${SIP_SOURCE_DIR}/packaging/sipd.service.in" "${_unit}" @ONLY)
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_unit}")

set(_conf "$ENV{DESTDIR}${SYSCONFDIR}/sip/sip.yaml")
if(EXISTS "${_conf}")
  message(STATUS "Up-to-date (kept as it is): ${_conf}")
else()
  file(INSTALL "${SIP_SOURCE_DIR}/packaging/sip.yaml" DESTINATION "${SYSCONFDIR}/sip") # DESTDIR added by file(INSTALL)
endif()
