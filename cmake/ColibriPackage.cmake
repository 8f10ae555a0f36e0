# install() rules and a Debian package. `cmake --install BUILD` puts the
# three binaries in bin/ and the deployment examples (systemd units, configs,
# make-certs.sh, the firewall, k8s/) under share/doc/colibri/; `cpack -G DEB`
# in the build folder makes colibri_VERSION_ARCH.deb installing into /usr,
# its Depends computed from the binaries' libraries (dpkg-shlibdeps).
# Installing needs only those three targets built (not the tests):
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY.
include(GNUInstallDirs)
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

install(TARGETS colibri-coordinator colibri-expert-node colibri-client
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Examples, not active configuration: deploy/install-host.sh (or the reader of
# HOMELAB.md) copies the units and configs into place and points ExecStart at
# the binaries.
set(colibri_examples ${CMAKE_INSTALL_DOCDIR}/examples)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/systemd ${PROJECT_SOURCE_DIR}/deploy/firewall
        DESTINATION ${colibri_examples})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/deploy/make-certs.sh DESTINATION ${colibri_examples})
install(FILES ${PROJECT_SOURCE_DIR}/deploy/HOMELAB.md ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/k8s DESTINATION ${colibri_examples})

set(CPACK_PACKAGE_NAME colibri)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Distributed mixture-of-experts inference: coordinator, expert node and client")
set(CPACK_PACKAGE_CONTACT "Colibri maintainers <colibri@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
include(CPack)
