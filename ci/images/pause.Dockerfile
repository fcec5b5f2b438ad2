# The pod sandbox image: Debian's static catatonit as /pause (no registry needed).
FROM scratch
COPY catatonit /pause
USER 65535:65535
ENTRYPOINT ["/pause", "-P"]
