// A graph's in-place writes of a few positions into its inputs (a StaticCache's decode step: each
// layer's new key and value at the current position), done in one call after the graph ran
// (runtime/position_writes.py). Through PyTorch, each write is an ``index_put_`` dispatched from
// Python: ~4 us warm, ~15 us on the cold caches a decode step's inference leaves, 60 per token on a
// 30-layer Llama. Here each is a few row copies.
//
// write(dsts, dims, indices, srcs, start) -> int
//   For k = start, start + 1, ...: dsts[k][..., indices[k][j], ...] = srcs[k][..., j, ...] along
//   dims[k], by index_put_'s rules (one 1-D index tensor, the values broadcast) where put[k] is
//   True, else by index_copy_'s; dsts[k]'s version is bumped as PyTorch's in-place ops do. Returns the first k it does not take: a write that is not the
//   plain case (another dtype, shape or device, an index out of range, a tensor subclass, an
//   inference tensor outside inference mode, ...), which the caller then hands to PyTorch, whose
//   semantics and errors apply; len(dsts) when all are done. A write is checked whole before any
//   byte of it is written.
//
// Only the Python C API and c10's TensorImpl are used, as in weight_stamp.cpp.

#include <Python.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kMaxRank = 8;

c10::TensorImpl* impl_of(PyObject* tensor) {
  PyObject* address = PyObject_GetAttrString(tensor, "_cdata");
  if (address == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  auto* impl = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(address));
  Py_DECREF(address);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return nullptr;
  }
  return impl;
}

bool plain(const c10::TensorImpl* t) {
  return t != nullptr && !t->is_python_dispatch() && t->has_storage() && t->is_cpu() &&
         t->layout() == c10::kStrided && !t->is_conj() && !t->is_neg() && !t->_is_zerotensor() &&
         !t->has_symbolic_sizes_strides() && t->dim() <= kMaxRank;
}

// One write, or false (nothing written) when it is not the plain case. ``put``: index_put_'s rules
// (a negative position counts from the end; the values broadcast to the written rows), else
// index_copy_'s (neither).
bool write_one(c10::TensorImpl* dst, int64_t dim, const c10::TensorImpl* index, const c10::TensorImpl* src,
               bool put) {
  if (!plain(dst) || !plain(index) || !plain(src)) return false;
  if (dst->dtype() != src->dtype() || index->dtype() != caffe2::TypeMeta::Make<int64_t>()) return false;
  const int64_t rank = dst->dim();
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank || index->dim() != 1) return false;
  if (src->dim() != rank && !(put && src->dim() < rank)) return false;
  const auto dst_sizes = dst->sizes();
  const int64_t n = index->sizes()[0];
  // The rows written (dst's shape with ``n`` along ``dim``) and where each element comes from in
  // src: its sizes aligned from the right, a dimension it broadcasts over read with stride 0.
  std::array<int64_t, kMaxRank> sizes{};
  std::array<int64_t, kMaxRank> src_strides{};
  const int64_t lead = rank - src->dim();
  for (int64_t k = 0; k < rank; ++k) {
    sizes[k] = k == dim ? n : dst_sizes[k];
    const int64_t size = k < lead ? 1 : src->sizes()[k - lead];
    const int64_t stride = k < lead ? 0 : src->strides()[k - lead];
    if (size == sizes[k]) {
      src_strides[k] = size == 1 ? 0 : stride;
    } else if (size == 1 && put) {
      src_strides[k] = 0;
    } else {
      return false;
    }
  }
  if (dst->unsafe_storage().unsafeGetStorageImpl() == src->unsafe_storage().unsafeGetStorageImpl() ||
      dst->unsafe_storage().unsafeGetStorageImpl() == index->unsafe_storage().unsafeGetStorageImpl()) {
    return false;  // overlapping memory: PyTorch's rules apply
  }
  const bool versioned = dst->version_counter().enabled();
  if (!versioned && !c10::InferenceMode::is_enabled()) return false;  // PyTorch raises its error
  int64_t count = 1;
  for (int64_t k = 0; k < rank; ++k) count *= sizes[k];
  if (count == 0) {
    if (versioned) dst->bump_version();
    return true;
  }
  // Every position in range before anything is written.
  const auto* positions = static_cast<const int64_t*>(index->data());
  const int64_t index_stride = index->strides()[0];
  const int64_t extent = dst_sizes[dim];
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t p = positions[j * index_stride];
    if (p < 0 && put) p += extent;
    if (p < 0 || p >= extent) return false;
    rows[j] = p;
  }
  // Trailing dimensions laid out alike and densely in both tensors are copied as one block.
  const auto dst_strides = dst->strides();
  const int64_t item = static_cast<int64_t>(dst->itemsize());
  int64_t block = 1;
  int64_t inner = rank;
  while (inner - 1 > dim && dst_strides[inner - 1] == block && src_strides[inner - 1] == block) {
    block *= sizes[inner - 1];
    --inner;
  }
  auto* to = static_cast<char*>(dst->mutable_data());
  const auto* from = static_cast<const char*>(src->data());
  const size_t bytes = static_cast<size_t>(block * item);
  // An odometer over dimensions [0, inner), the written one taking the positions.
  std::array<int64_t, kMaxRank> at{};
  while (true) {
    int64_t to_offset = 0;
    int64_t from_offset = 0;
    for (int64_t k = 0; k < inner; ++k) {
      to_offset += (k == dim ? rows[at[k]] : at[k]) * dst_strides[k];
      from_offset += at[k] * src_strides[k];
    }
    std::memcpy(to + to_offset * item, from + from_offset * item, bytes);
    int64_t k = inner - 1;
    for (; k >= 0; --k) {
      if (++at[k] < sizes[k]) break;
      at[k] = 0;
    }
    if (k < 0) break;
  }
  if (versioned) dst->bump_version();
  return true;
}

PyObject* write(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 6 || !PyList_Check(argv[0]) || !PyTuple_Check(argv[1]) || !PyList_Check(argv[2]) ||
      !PyList_Check(argv[3]) || !PyTuple_Check(argv[4])) {
    PyErr_SetString(PyExc_TypeError,
                    "write(dsts: list, dims: tuple, indices: list, srcs: list, put: tuple, start: int)");
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(argv[0]);
  if (PyTuple_GET_SIZE(argv[1]) != n || PyList_GET_SIZE(argv[2]) != n || PyList_GET_SIZE(argv[3]) != n ||
      PyTuple_GET_SIZE(argv[4]) != n) {
    PyErr_SetString(PyExc_ValueError, "write(): dsts, dims, indices, srcs and put differ in length");
    return nullptr;
  }
  Py_ssize_t k = PyLong_AsSsize_t(argv[5]);
  if (k == -1 && PyErr_Occurred()) return nullptr;
  for (; k < n; ++k) {
    const int64_t dim = PyLong_AsLongLong(PyTuple_GET_ITEM(argv[1], k));
    if (dim == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      break;
    }
    c10::TensorImpl* dst = impl_of(PyList_GET_ITEM(argv[0], k));
    const c10::TensorImpl* index = impl_of(PyList_GET_ITEM(argv[2], k));
    const c10::TensorImpl* src = impl_of(PyList_GET_ITEM(argv[3], k));
    bool done;
    try {
      done = write_one(dst, dim, index, src, PyTuple_GET_ITEM(argv[4], k) == Py_True);
    } catch (...) {  // a field c10 would not read (never expected for plain tensors): PyTorch's path
      done = false;
    }
    if (!done) break;
  }
  return PyLong_FromSsize_t(k);
}

PyMethodDef methods[] = {
    {"write", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(write)), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "index_writes", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_index_writes() { return PyModule_Create(&module); }
