// The per-call check that a graph's frozen weights are still the tensors, and the contents, that
// OpenVINO's constants hold (runtime/frozen_weights.py). In Python it costs ~0.2 ms per 1,000
// tensors per call: three attribute reads per tensor, each building a Python int. Here it reads the
// same fields straight from each TensorImpl: a few ns per tensor.
//
// A stamp is a PyCapsule made by make(tensors, positions):
//   same(stamp, args)      True when args[positions[k]] is tensors[k] for every k and no tensor
//                          changed since the stamp was taken
//   identical(stamp, args) the identity half alone
//   take(stamp)            stamp the tensors' current state
// "Changed" is what PyTorch's tracked paths leave behind: a new version counter (in-place ops,
// copy_, load_state_dict), another storage or data pointer (param.data = t, storage resizes), or
// another storage offset. Inference tensors track no version; their data pointers are compared.
//
// Only the Python C API and c10's TensorImpl are used: it builds in ~3 s (fxvino/native).

#include <Python.h>
#include <c10/core/TensorImpl.h>

#include <cstdint>
#include <vector>

namespace {

const char* const kCapsule = "fxvino.weight_stamp";

// Everything one tensor's check reads from our side, together: one stream of records beside the
// three cache lines it reads from the tensor (its TensorImpl, version counter and StorageImpl).
struct Record {
  Py_ssize_t position;
  PyObject* tensor;  // borrowed: Stamp::tensors owns it
  const c10::TensorImpl* impl;
  const c10::StorageImpl* storage;
  const void* data;
  int64_t offset;
  uint32_t version;
  bool versioned;
};

void look(Record& r) {
  const auto& counter = r.impl->version_counter();
  r.versioned = counter.enabled();
  r.version = r.versioned ? counter.current_version() : 0u;
  r.storage = r.impl->unsafe_storage().unsafeGetStorageImpl();
  r.data = r.storage != nullptr ? r.storage->data_ptr().get() : nullptr;
  r.offset = r.impl->storage_offset();
}

struct Stamp {
  PyObject* tensors = nullptr;  // an owned tuple: it keeps every TensorImpl below alive
  std::vector<Record> records;

  void take() {
    for (auto& r : records) look(r);
  }

  static bool items_of(PyObject* args, PyObject**& items, Py_ssize_t& n) {
    if (PyList_CheckExact(args)) {
      items = reinterpret_cast<PyListObject*>(args)->ob_item;
      n = PyList_GET_SIZE(args);
    } else if (PyTuple_CheckExact(args)) {
      items = reinterpret_cast<PyTupleObject*>(args)->ob_item;
      n = PyTuple_GET_SIZE(args);
    } else {
      return false;
    }
    return true;
  }

  bool identical(PyObject* args) const {
    PyObject** items;
    Py_ssize_t n;
    if (!items_of(args, items, n)) return false;
    for (const auto& r : records) {
      if (r.position >= n || items[r.position] != r.tensor) return false;
    }
    return true;
  }

  bool same(PyObject* args) const {
    PyObject** items;
    Py_ssize_t n;
    if (!items_of(args, items, n)) return false;
    const size_t m = records.size();
    const Record* rs = records.data();
    for (size_t k = 0; k < m; ++k) {
      if (k + 6 < m) __builtin_prefetch(rs[k + 6].impl);  // the next tensors' lines load meanwhile
      const Record& r = rs[k];
      if (r.position >= n || items[r.position] != r.tensor) return false;
      const c10::TensorImpl* impl = r.impl;
      if (r.versioned && impl->version_counter().current_version() != r.version) return false;
      const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
      if (storage != r.storage || impl->storage_offset() != r.offset) return false;
      if (storage != nullptr && storage->data_ptr().get() != r.data) return false;
    }
    return true;
  }
};

Stamp* stamp_of(PyObject* capsule) {
  return static_cast<Stamp*>(PyCapsule_GetPointer(capsule, kCapsule));
}

void drop(PyObject* capsule) {
  Stamp* stamp = stamp_of(capsule);
  if (stamp == nullptr) return;
  Py_XDECREF(stamp->tensors);
  delete stamp;
}

// make(tensors: tuple[Tensor, ...], positions: tuple[int, ...]) -> capsule
// Raises ValueError for a tensor whose fields are not plain (a Python subclass that dispatches, a
// tensor without storage): the caller then checks in Python.
PyObject* make(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 2 || !PyTuple_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
      PyTuple_GET_SIZE(argv[0]) != PyTuple_GET_SIZE(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "make(tensors: tuple, positions: tuple) of equal lengths");
    return nullptr;
  }
  auto* stamp = new Stamp();
  stamp->tensors = argv[0];
  Py_INCREF(stamp->tensors);
  PyObject* capsule = PyCapsule_New(stamp, kCapsule, drop);
  if (capsule == nullptr) {
    Py_DECREF(stamp->tensors);
    delete stamp;
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(argv[0]);
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* address = PyObject_GetAttrString(PyTuple_GET_ITEM(argv[0], k), "_cdata");
    if (address == nullptr) {
      Py_DECREF(capsule);
      return nullptr;
    }
    auto* impl = static_cast<const c10::TensorImpl*>(PyLong_AsVoidPtr(address));
    Py_DECREF(address);
    const Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(argv[1], k));
    if (PyErr_Occurred()) {
      Py_DECREF(capsule);
      return nullptr;
    }
    if (impl == nullptr || impl->is_python_dispatch() || !impl->has_storage() || position < 0) {
      PyErr_Format(PyExc_ValueError, "tensor %zd is not a plain tensor with storage", k);
      Py_DECREF(capsule);
      return nullptr;
    }
    Record r{};
    r.position = position;
    r.tensor = PyTuple_GET_ITEM(argv[0], k);
    r.impl = impl;
    stamp->records.push_back(r);
  }
  try {
    stamp->take();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_ValueError, "cannot read a tensor's fields: %s", e.what());
    Py_DECREF(capsule);
    return nullptr;
  }
  return capsule;
}

PyObject* same(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  Stamp* stamp = argc == 2 ? stamp_of(argv[0]) : nullptr;
  if (stamp == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "same(stamp, args)");
    return nullptr;
  }
  bool ok;
  try {
    ok = stamp->same(argv[1]);
  } catch (...) {  // never expected for plain tensors; the slow path then decides
    ok = false;
  }
  return PyBool_FromLong(ok);
}

PyObject* identical(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  Stamp* stamp = argc == 2 ? stamp_of(argv[0]) : nullptr;
  if (stamp == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "identical(stamp, args)");
    return nullptr;
  }
  return PyBool_FromLong(stamp->identical(argv[1]));
}

PyObject* take(PyObject*, PyObject* capsule) {
  Stamp* stamp = stamp_of(capsule);
  if (stamp == nullptr) return nullptr;
  try {
    stamp->take();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "cannot read a tensor's fields: %s", e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"make", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(make)), METH_FASTCALL, nullptr},
    {"same", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(same)), METH_FASTCALL, nullptr},
    {"identical", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(identical)), METH_FASTCALL,
     nullptr},
    {"take", take, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "weight_stamp", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_weight_stamp() { return PyModule_Create(&module); }
