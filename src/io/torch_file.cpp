// PyTorch .pt/.pth files as torch.save writes them since 1.6: a zip archive
// holding data.pkl (a pickle of the state dict), data/<key> (raw storage
// bytes) and version. The pickle is interpreted, not executed: a small
// machine that knows the opcodes torch.save emits and builds only dicts,
// tuples, numbers, strings and tensors. Any other global a pickle asks for
// (os.system, a model class, ...) is refused.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <variant>

#include "kiln/io.h"

namespace kiln::io {
namespace {

struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct StorageRef {
  std::string key;
  DType dtype;
  int64_t numel;
};
struct Value {
  enum Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, TensorValue, Mark } kind = None;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String, Global ("module name")
  std::vector<ValuePtr> items;  // Tuple, List
  std::vector<std::pair<ValuePtr, ValuePtr>> dict;
  StorageRef storage;
  Tensor tensor;
};

ValuePtr make(Value::Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

const std::map<std::string, DType>& storage_types() {
  static const std::map<std::string, DType> types{
      {"torch FloatStorage", DType::Float32}, {"torch DoubleStorage", DType::Float64},
      {"torch HalfStorage", DType::Float16},  {"torch BFloat16Storage", DType::BFloat16},
      {"torch LongStorage", DType::Int64},    {"torch IntStorage", DType::Int32},
      {"torch ByteStorage", DType::UInt8},    {"torch BoolStorage", DType::Bool},
      {"torch CharStorage", DType::Int8}};
  return types;
}

// A zip archive's entries, in order, through libarchive (seekable: from the
// central directory).
class ZipEntries {
 public:
  explicit ZipEntries(const std::string& path) : path_(path) {
    archive_read_support_format_zip_seekable(a_);
    if (archive_read_open_filename(a_, path.c_str(), 1 << 16) != ARCHIVE_OK) not_a_zip();
  }
  ~ZipEntries() { archive_read_free(a_); }
  ZipEntries(const ZipEntries&) = delete;
  ZipEntries& operator=(const ZipEntries&) = delete;

  // The next entry's name and size; false after the last.
  bool next(std::string& name, uint64_t& size) {
    archive_entry* e = nullptr;
    const int rc = archive_read_next_header(a_, &e);
    if (rc == ARCHIVE_EOF) return false;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      if (first_) not_a_zip();
      KILN_FAIL("'", path_, "' is damaged (", archive_error_string(a_), ")");
    }
    first_ = false;
    name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    size = static_cast<uint64_t>(std::max<la_int64_t>(0, archive_entry_size(e)));
    return true;
  }
  // Reads the current entry into `dst`, exactly `bytes` long.
  void read(const std::string& name, void* dst, uint64_t bytes) {
    char* out = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < bytes) {
      const la_ssize_t n = archive_read_data(a_, out + done, static_cast<size_t>(bytes - done));
      KILN_CHECK(n > 0, "'", path_, "': entry '", name, "' is truncated or corrupt",
                 n < 0 ? std::string(" (") + archive_error_string(a_) + ")" : std::string());
      done += static_cast<uint64_t>(n);
    }
  }

 private:
  [[noreturn]] void not_a_zip() {
    KILN_FAIL("'", path_, "' is not a readable zip archive (", archive_error_string(a_) ? archive_error_string(a_) : "",
              "); Kiln reads .pt files written by torch.save since PyTorch 1.6, and safetensors");
  }
  std::string path_;
  archive* a_ = archive_read_new();
  bool first_ = true;
};

class Unpickler {
 public:
  Unpickler(const std::string& data, const std::string& path, std::function<Tensor(const StorageRef&)> load_storage)
      : d_(data), path_(path), load_storage_(std::move(load_storage)) {}
  // Containers may hold themselves (memo references make cycles); emptying
  // them all breaks every cycle so that the values are freed.
  ~Unpickler() {
    for (auto& c : containers_) {
      c->items.clear();
      c->dict.clear();
    }
  }

  ValuePtr run() {
    for (;;) {
      uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;                          // PROTO
        case 0x95: skip(8); break;                         // FRAME
        case '(': push(make(Value::Mark)); break;          // MARK
        case '.': KILN_CHECK(stack_.size() == 1, where(), "the pickle ends with ", stack_.size(), " values");
          return stack_.back();                            // STOP
        case 'N': push(make(Value::None)); break;
        case 0x88: case 0x89: { auto v = make(Value::Bool); v->i = op == 0x88; push(v); break; }
        case 'K': push_int(byte()); break;                 // BININT1
        case 'M': push_int(le(2)); break;                  // BININT2
        case 'J': push_int(static_cast<int32_t>(le(4))); break;  // BININT
        case 0x8a: {                                       // LONG1
          size_t n = byte();
          KILN_CHECK(n <= 8, where(), "an integer of ", n, " bytes is too large");
          uint64_t v = n ? le(n) : 0;
          if (n && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
          push_int(static_cast<int64_t>(v));
          break;
        }
        case 'G': {                                        // BINFLOAT, big-endian
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | byte();
          auto v = make(Value::Float);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'X': push_string(le(4)); break;               // BINUNICODE
        case 0x8c: push_string(byte()); break;             // SHORT_BINUNICODE
        case 0x8d: push_string(le(8)); break;              // BINUNICODE8
        case 'c': {                                        // GLOBAL "module\nname\n"
          std::string module = line(), name = line();
          push(global(module + " " + name));
          break;
        }
        case 0x93: {                                       // STACK_GLOBAL
          ValuePtr name = pop(), module = pop();
          KILN_CHECK(name->kind == Value::String && module->kind == Value::String, where(), "STACK_GLOBAL needs strings");
          push(global(module->s + " " + name->s));
          break;
        }
        case 'q': memo_[byte()] = top(); break;            // BINPUT
        case 'r': memo_[le(4)] = top(); break;             // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;     // MEMOIZE
        case 'h': push(memo(byte())); break;               // BINGET
        case 'j': push(memo(le(4))); break;                // LONG_BINGET
        case ')': push(make(Value::Tuple)); break;         // EMPTY_TUPLE
        case ']': push(container(Value::List)); break;     // EMPTY_LIST
        case '}': push(container(Value::Dict)); break;     // EMPTY_DICT
        case 't': { auto v = make(Value::Tuple); v->items = pop_to_mark(); push(v); break; }
        case 0x85: case 0x86: case 0x87: {                 // TUPLE1..3
          auto v = make(Value::Tuple);
          v->items.resize(op - 0x84);
          for (size_t k = v->items.size(); k-- > 0;) v->items[k] = pop();
          push(v);
          break;
        }
        case 'a': { ValuePtr x = pop(); list_of(top())->items.push_back(x); break; }  // APPEND
        case 'e': { auto xs = pop_to_mark(); auto l = list_of(top()); l->items.insert(l->items.end(), xs.begin(), xs.end()); break; }
        case 's': { ValuePtr v = pop(), k = pop(); dict_of(top())->dict.emplace_back(k, v); break; }  // SETITEM
        case 'u': {                                        // SETITEMS
          auto xs = pop_to_mark();
          KILN_CHECK(xs.size() % 2 == 0, where(), "SETITEMS with an odd number of values");
          auto dct = dict_of(top());
          for (size_t k = 0; k < xs.size(); k += 2) dct->dict.emplace_back(xs[k], xs[k + 1]);
          break;
        }
        case 'b': pop(); break;                            // BUILD: a dict's attributes (_metadata): not needed
        case 'Q': {                                        // BINPERSID
          ValuePtr pid = pop();
          push(storage(pid));
          break;
        }
        case 'R': {                                        // REDUCE
          ValuePtr args = pop(), fn = pop();
          push(reduce(fn, args));
          break;
        }
        default:
          KILN_FAIL(where(), "pickle opcode 0x", hex(op), " is not one torch.save writes for a state dict; Kiln reads ",
                    "state dicts (torch.save(model.state_dict(), path)), not arbitrary pickles");
      }
    }
  }

  // Copies every tensor out of its storage, once the storages are read.
  void fill_tensors() {
    for (auto& fill : fills_) fill();
  }

 private:
  std::string where() const { return "'" + path_ + "' (data.pkl at byte " + std::to_string(pos_) + "): "; }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  uint8_t byte() {
    KILN_CHECK(pos_ < d_.size(), where(), "the pickle is truncated");
    return static_cast<uint8_t>(d_[pos_++]);
  }
  void skip(size_t n) {
    KILN_CHECK(n <= d_.size() - pos_, where(), "the pickle is truncated");
    pos_ += n;
  }
  uint64_t le(size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t{byte()} << (8 * k);
    return v;
  }
  std::string line() {
    size_t end = d_.find('\n', pos_);
    KILN_CHECK(end != std::string::npos && end - pos_ < 256, where(), "a malformed GLOBAL");
    std::string s = d_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push(ValuePtr v) {
    KILN_CHECK(stack_.size() < (1u << 20), where(), "the pickle's stack grows without bound");
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) { auto v = make(Value::Int); v->i = i; push(v); }
  void push_string(uint64_t n) {
    KILN_CHECK(n <= d_.size() - pos_, where(), "a string runs past the end of the pickle");
    auto v = make(Value::String);
    v->s = d_.substr(pos_, n);
    pos_ += n;
    push(v);
  }
  ValuePtr pop() {
    KILN_CHECK(!stack_.empty() && stack_.back()->kind != Value::Mark, where(), "the pickle pops an empty stack");
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  ValuePtr top() {
    KILN_CHECK(!stack_.empty(), where(), "the pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_to_mark() {
    std::vector<ValuePtr> out;
    while (!stack_.empty() && stack_.back()->kind != Value::Mark) {
      out.push_back(stack_.back());
      stack_.pop_back();
    }
    KILN_CHECK(!stack_.empty(), where(), "no MARK to pop to");
    stack_.pop_back();
    return {out.rbegin(), out.rend()};
  }
  ValuePtr container(Value::Kind kind) {
    containers_.push_back(make(kind));
    return containers_.back();
  }
  ValuePtr memo(uint64_t k) {
    auto it = memo_.find(k);
    KILN_CHECK(it != memo_.end(), where(), "memo entry ", k, " was never stored");
    return it->second;
  }
  ValuePtr list_of(const ValuePtr& v) {
    KILN_CHECK(v->kind == Value::List, where(), "APPEND to something that is not a list");
    return v;
  }
  ValuePtr dict_of(const ValuePtr& v) {
    KILN_CHECK(v->kind == Value::Dict, where(), "SETITEM on something that is not a dict");
    return v;
  }
  ValuePtr global(const std::string& name) {
    static const std::set<std::string> allowed{"collections OrderedDict", "torch._utils _rebuild_tensor_v2",
                                               "torch._utils _rebuild_parameter"};
    KILN_CHECK(allowed.count(name) || storage_types().count(name), where(), "the pickle asks for '", name,
               "', which Kiln will not run. A state dict needs only tensors and dicts: save with "
               "torch.save(model.state_dict(), path) (a whole pickled model, or other objects, cannot be read safely)");
    auto v = make(Value::Global);
    v->s = name;
    return v;
  }
  ValuePtr storage(const ValuePtr& pid) {
    // ('storage', torch.XStorage, key, location, numel)
    KILN_CHECK(pid->kind == Value::Tuple && pid->items.size() == 5 && pid->items[0]->kind == Value::String &&
                   pid->items[0]->s == "storage" && pid->items[1]->kind == Value::Global &&
                   pid->items[2]->kind == Value::String && pid->items[4]->kind == Value::Int,
               where(), "a persistent id that is not a tensor storage");
    auto it = storage_types().find(pid->items[1]->s);
    KILN_CHECK(it != storage_types().end(), where(), "storage type ", pid->items[1]->s, " is not supported");
    KILN_CHECK(pid->items[4]->i >= 0, where(), "a storage with a negative size");
    auto v = make(Value::Storage);
    v->storage = {pid->items[2]->s, it->second, pid->items[4]->i};
    return v;
  }
  static std::vector<int64_t> ints(const ValuePtr& t, const std::string& what, const std::string& where) {
    KILN_CHECK(t->kind == Value::Tuple, where, what, " is not a tuple");
    std::vector<int64_t> out;
    for (auto& x : t->items) {
      KILN_CHECK(x->kind == Value::Int && x->i >= 0 && x->i < (int64_t{1} << 48), where, what, " holds an invalid value");
      out.push_back(x->i);
    }
    return out;
  }
  ValuePtr reduce(const ValuePtr& fn, const ValuePtr& args) {
    KILN_CHECK(fn->kind == Value::Global && args->kind == Value::Tuple, where(), "REDUCE of something not callable");
    if (fn->s == "collections OrderedDict") return container(Value::Dict);
    if (fn->s == "torch._utils _rebuild_parameter") {
      KILN_CHECK(!args->items.empty() && args->items[0]->kind == Value::TensorValue, where(), "a malformed parameter");
      return args->items[0];
    }
    KILN_CHECK(fn->s == "torch._utils _rebuild_tensor_v2" && args->items.size() >= 4 &&
                   args->items[0]->kind == Value::Storage && args->items[1]->kind == Value::Int,
               where(), "a malformed tensor record");
    const StorageRef& st = args->items[0]->storage;
    int64_t offset = args->items[1]->i;
    auto size = ints(args->items[2], "the tensor's size", where());
    auto stride = ints(args->items[3], "the tensor's stride", where());
    KILN_CHECK(size.size() == stride.size() && offset >= 0, where(), "a tensor with ", size.size(), " sizes and ",
               stride.size(), " strides");
    int64_t count = checked_numel(Shape(size.begin(), size.end()), int64_t{1} << 48);
    KILN_CHECK(count >= 0, where(), "a tensor whose size overflows");
    // The last element the view reaches (each size and stride fits in 48 bits;
    // their products need not).
    int64_t extent = offset;
    for (size_t k = 0; count > 0 && k < size.size(); ++k) {
      int64_t term = 0;
      KILN_CHECK(!__builtin_mul_overflow(size[k] - 1, stride[k], &term) && !__builtin_add_overflow(extent, term, &extent),
                 where(), "a tensor whose strides overflow");
    }
    KILN_CHECK(count == 0 || extent < st.numel, where(), "a tensor of size ", shape_str(Shape(size.begin(), size.end())),
               " reaches element ", extent, " of a storage of ", st.numel, ": the file lies about its layout");
    Tensor base = load_storage_(st);
    auto v = make(Value::TensorValue);
    Tensor view = Tensor::empty(Shape(size.begin(), size.end()), st.dtype);
    // The storage is filled once the pickle is read: its copy waits until then.
    fills_.push_back([base, view, offset, size, stride, count, elem = dtype_size(st.dtype)] {
      // Copy the strided view out of the storage (views and tied weights read the same bytes).
      const char* src = static_cast<const char*>(base.raw_data());
      char* dst = static_cast<char*>(view.raw_data());
      std::vector<int64_t> index(size.size(), 0);
      for (int64_t n = 0; n < count; ++n) {
        int64_t at = offset;
        for (size_t k = 0; k < size.size(); ++k) at += index[k] * stride[k];
        std::memcpy(dst + static_cast<size_t>(n) * elem, src + static_cast<size_t>(at) * elem, elem);
        for (size_t k = size.size(); k-- > 0;) {
          if (++index[k] < size[k]) break;
          index[k] = 0;
        }
      }
    });
    v->tensor = view;
    return v;
  }

  const std::string& d_;
  std::string path_;
  std::function<Tensor(const StorageRef&)> load_storage_;
  std::vector<std::function<void()>> fills_;  // copies out of storages, run once they are read
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::map<uint64_t, ValuePtr> memo_;
  std::vector<ValuePtr> containers_;
};

void flatten(const ValuePtr& v, const std::string& prefix, NamedTensors& out, const std::string& path, int depth = 0) {
  // A dict may hold itself (memo references make cycles): bound the nesting.
  KILN_CHECK(depth < 32, "'", path, "': dicts nested more than 32 deep (or holding themselves); not a state dict");
  if (v->kind == Value::TensorValue) {
    out.emplace_back(prefix, v->tensor);
    return;
  }
  if (v->kind != Value::Dict) return;  // numbers, strings (e.g. "epoch": 3) are not weights
  for (auto& [k, x] : v->dict) {
    KILN_CHECK(k->kind == Value::String || k->kind == Value::Int, "'", path, "': a dict key that is not a string");
    std::string key = k->kind == Value::String ? k->s : std::to_string(k->i);
    flatten(x, prefix.empty() ? key : prefix + "." + key, out, path, depth + 1);
  }
}

}  // namespace

NamedTensors load_torch_file(const std::string& path) {
  // Two passes in entry order: the pickle says which storages there are and
  // what they hold, and then the storages are read straight into tensors.
  std::string root, pickle;
  {
    ZipEntries zip(path);
    std::string name;
    uint64_t size = 0;
    while (zip.next(name, size)) {
      if (name.size() < 9 || name.compare(name.size() - 9, 9, "/data.pkl") != 0) continue;
      root = name.substr(0, name.size() - 9);
      KILN_CHECK(size < (uint64_t{1} << 32), "'", path, "': data.pkl of ", size, " bytes is not a state dict's pickle");
      pickle.resize(size);
      zip.read(name, pickle.data(), size);
      break;
    }
  }
  KILN_CHECK(!root.empty(), "'", path, "' is a zip archive without data.pkl: not a file written by torch.save");
  std::map<std::string, Tensor> storages;  // by entry name
  auto load_storage = [&](const StorageRef& st) {
    const std::string entry = root + "/data/" + st.key;
    auto it = storages.find(entry);
    if (it != storages.end()) {
      KILN_CHECK(it->second.dtype() == st.dtype && it->second.numel() == st.numel, "'", path, "': storage ", st.key,
                 " is described in two ways");
      return it->second;
    }
    Tensor t = Tensor::empty({st.numel}, st.dtype);
    storages[entry] = t;
    return t;
  };
  Unpickler u(pickle, path, load_storage);
  ValuePtr result = u.run();
  std::set<std::string> read;
  if (!storages.empty()) {
    ZipEntries zip(path);
    std::string name;
    uint64_t size = 0;
    while (zip.next(name, size)) {
      auto it = storages.find(name);
      if (it == storages.end() || read.count(name)) continue;
      const Tensor& t = it->second;
      const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
      KILN_CHECK(size == bytes, "'", path, "': entry '", name, "' holds ", size, " bytes, expected ", bytes);
      zip.read(name, t.raw_data(), bytes);
      read.insert(name);
    }
  }
  for (const auto& [entry, t] : storages)
    KILN_CHECK(read.count(entry), "'", path, "' has no entry '", entry, "'");
  u.fill_tensors();
  NamedTensors out;
  flatten(result, "", out, path);
  KILN_CHECK(!out.empty(), "'", path, "' holds no tensors (is it a state dict?)");
  return out;
}

NamedTensors load_tensor_file(const std::string& path) {
  std::string head(16, '\0');
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    KILN_CHECK(f != nullptr, "cannot open '", path, "'");
    size_t n = std::fread(head.data(), 1, head.size(), f);
    std::fclose(f);
    head.resize(n);
  }
  if (head.size() >= 4 && head.compare(0, 4, "PK\x03\x04") == 0) return load_torch_file(path);
  KILN_CHECK(!(head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0x80), "'", path,
             "' is a legacy (pre-1.6) torch.save file; load and save it again with a recent PyTorch");
  if (is_mindspore_checkpoint(path)) {
    MindsporeCheckpoint ckpt = load_mindspore_checkpoint(path);
    KILN_CHECK(!ckpt.tensors.empty(), "'", path, "' holds only strings, no tensors");
    return ckpt.tensors;
  }
  return load_safetensors(path).tensors;
}

}  // namespace kiln::io
