# The e2e suite's probe image (wget, sh, nc): Debian's static busybox on an empty image.
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "mkdir", "-m", "1777", "/tmp"]
USER 65534:65534
ENTRYPOINT ["/bin/sh"]
