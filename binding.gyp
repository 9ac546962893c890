# The TUN addon (src/tun/native/tun.cc) and the pinned-map file mapping (pin.cc): node-addon-api with C++ exceptions off, so an error in
# the addon is a JS exception or a counter, never an abort. Linux only (TUN ioctls).
{
  "targets": [
    {
      "target_name": "kubetun_tun",
      "sources": ["src/tun/native/tun.cc", "src/tun/native/pin.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_DISABLE_CPP_EXCEPTIONS", "NAPI_VERSION=8"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}
