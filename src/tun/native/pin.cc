// kubetun pinned maps: a file mapped MAP_SHARED into this process, handed to JS as an
// ArrayBuffer whose memory is the file's pages (the bpffs pinned-map analogue). The file lives
// on a tmpfs (/run, /dev/shm), so the pages are RAM that outlives the process: a restarted
// agent maps the same file and sees every map exactly as the dead one left it.
//
// Exports (added to the kubetun_tun module by tun.cc's Init):
//   mapFile(path, offset, length) -> ArrayBuffer   the file must exist and be long enough
//                                                   (the caller creates and sizes it); offset
//                                                   a multiple of the page size
// The mapping is removed when the ArrayBuffer is collected (or the process ends); the fd is
// closed at once (a mapping keeps the file's pages by itself).
#include <napi.h>
#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace kubetun_pin {

namespace {

Napi::Value Fail(Napi::Env env, const std::string& what, int err) {
  Napi::Error e = Napi::Error::New(env, what + ": " + strerror(err));
  e.Set("code", Napi::String::New(env, uv_err_name(-err)));
  e.Set("errno", Napi::Number::New(env, err));
  e.ThrowAsJavaScriptException();
  return env.Undefined();
}

void Unmap(Napi::Env, void* data, size_t* length) {
  munmap(data, *length);
  delete length;
}

Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber()) {
    Napi::TypeError::New(env, "mapFile(path: string, offset: number, length: number)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string path = info[0].As<Napi::String>().Utf8Value();
  double off = info[1].As<Napi::Number>().DoubleValue();
  double len = info[2].As<Napi::Number>().DoubleValue();
  long page = sysconf(_SC_PAGESIZE);
  if (off < 0 || len <= 0 || off != static_cast<double>(static_cast<int64_t>(off)) ||
      static_cast<int64_t>(off) % page != 0 || len > 8.0 * (1ull << 30)) {
    Napi::RangeError::New(env, "mapFile: offset must be page aligned, length in 1..8 GiB")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Fail(env, "open " + path, errno);
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int err = errno;
    ::close(fd);
    return Fail(env, "fstat " + path, err);
  }
  size_t length = static_cast<size_t>(len);
  off_t offset = static_cast<off_t>(off);
  if (st.st_size < offset + static_cast<off_t>(length)) {
    ::close(fd);
    return Fail(env, "mapFile " + path + " (file shorter than the mapping)", EINVAL);
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Fail(env, "mmap " + path, err);
  return Napi::ArrayBuffer::New(env, p, length, Unmap, new size_t(length));
}

}  // namespace

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("mapFile", Napi::Function::New(env, MapFile));
}

}  // namespace kubetun_pin
