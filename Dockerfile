# pagoda: CUDA image. Build stage compiles with nvcc; the runtime stage carries only the binary
# and the CUDA runtime libraries. The model is mounted at /models.
#   docker build -t pagoda .
#   docker run --gpus all -p 8080:8080 -v $PWD/models:/models pagoda --model /models/model.gguf
ARG CUDA_VERSION=12.6.3
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        cmake g++ make pkg-config libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev libzmq3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_BUILD_TESTS=OFF \
        -DCMAKE_CUDA_ARCHITECTURES="80;90" \
    && cmake --build build -j"$(nproc)" --target pagoda \
    && mkdir -p /out/lib \
    && ldd build/pagoda | awk '/httplib|spdlog|fmt/ {print $3}' | xargs -r cp -t /out/lib

FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        curl libzmq5 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home pagoda
COPY --from=build /src/build/pagoda /usr/local/bin/pagoda
COPY --from=build /out/lib/ /usr/local/lib/
RUN ldconfig
COPY configs /etc/pagoda
USER pagoda
VOLUME /models
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["pagoda", "serve", "--host", "0.0.0.0", "--port", "8080", "--device", "auto"]
CMD ["--model", "/models/model.gguf"]
