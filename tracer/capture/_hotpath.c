/* The capture's per-call loops in C (issue 18): the argument scan, the output records and the source
 * site of `CaptureSession.__torch_function__`, the tensors a module call takes and returns, and the
 * weights-free guard's scan of a call's arguments. Optional: `tracer.capture.kernel.native` falls back to
 * the session's own Python when this module is not built, and every function here returns None for a
 * case it does not handle (the Python then does the whole step), so the two paths record the same.
 * What it reads of the session and of a guard is the contract's (`tracer/capture/kernel/contract.py`):
 * CaptureState's and GuardFastPath's slots by offset, the raw record's fields by the contract's positions.
 *
 * No function here keeps a reference it was given beyond the containers the caller passed in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include "_slots.h"
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* The interpreter's frames (read by `site` on CPython 3.11 without making frame objects). */
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#define HOTPATH_UNDEF_BUILD_CORE
#endif
#include <internal/pycore_frame.h>
#ifdef HOTPATH_UNDEF_BUILD_CORE
#undef Py_BUILD_CORE
#endif
#endif
static int frame_objects = 0;  /* 1: `site` walks frame objects through the public API */

static PyObject *tensor_type = NULL;   /* torch.Tensor */
static PyObject *placeholder = NULL;   /* call_template.TENSOR */
static PyObject *positions = NULL;     /* ("0", "1", ...): the position names of top-level arguments */
static PyObject *object_class = NULL;  /* object.__dict__["__class__"] (borrowed from object's type dict) */
static PyObject *str_class, *str_shape, *str_dtype, *str_device, *str_requires_grad, *str_startswith, *str_is_meta, *str_type,
    *str_meta;

/* Field positions of the raw record: R_* in _slots.h, read from the contract's RECORD_FIELDS by `configure`. */

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *t, *p, *pos, *fields;
    if (!PyArg_ParseTuple(args, "OOO!O:configure", &t, &p, &PyTuple_Type, &pos, &fields))
        return NULL;
    if (record_positions(fields) < 0)
        return NULL;
    Py_XSETREF(tensor_type, Py_NewRef(t));
    Py_XSETREF(placeholder, Py_NewRef(p));
    Py_XSETREF(positions, Py_NewRef(pos));
    Py_RETURN_NONE;
}

static int
ready(void)
{
    if (tensor_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._hotpath is not configured");
        return 0;
    }
    return 1;
}

/* The object a tmap reference points at (borrowed): the tensor itself, or a weak reference's referent. */
static PyObject *
held_object(PyObject *ref)
{
    if (PyWeakref_CheckRefExact(ref)) {
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *obj = NULL;
        if (PyWeakref_GetRef(ref, &obj) < 0) {
            PyErr_Clear();
            return NULL;
        }
        Py_XDECREF(obj);  /* only its identity is compared; the tensor is alive in the caller's arguments */
        return obj;
#else
        return PyWeakref_GET_OBJECT(ref);
#endif
    }
    return ref;
}

/* One tensor argument: a parameter's address into `params`, an earlier op's (index, position) into
 * `parents`. Returns 0 when done, 1 when the Python path must handle it (a buffer, whose version is
 * watched; a tensor no op produced), -1 on error. */
static int
classify(PyObject *t, PyObject *pos, PyObject *tmap, PyObject *param_ids, PyObject *buffer_ids, PyObject *parents,
         PyObject *params)
{
    PyObject *tid = PyLong_FromVoidPtr(t);
    if (tid == NULL)
        return -1;
    int rc = 1;
    PyObject *addr = PyDict_GetItemWithError(param_ids, tid);
    if (addr != NULL) {
        rc = PySet_Contains(buffer_ids, tid);  /* a buffer: the Python path, which watches it for writes */
        if (rc == 0)
            rc = PyList_Append(params, addr) < 0 ? -1 : 0;
        goto done;
    }
    if (PyErr_Occurred()) {
        rc = -1;
        goto done;
    }
    PyObject *hit = PyDict_GetItemWithError(tmap, tid);
    if (hit == NULL) {
        rc = PyErr_Occurred() ? -1 : 1;
        goto done;
    }
    if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 2 || held_object(PyTuple_GET_ITEM(hit, 1)) != t) {
        rc = 1;
        goto done;
    }
    PyObject *edge = PyTuple_Pack(2, PyTuple_GET_ITEM(hit, 0), pos);
    if (edge == NULL) {
        rc = -1;
        goto done;
    }
    rc = PyList_Append(parents, edge) < 0 ? -1 : 0;
    Py_DECREF(edge);
done:
    Py_DECREF(tid);
    return rc;
}

/* isinstance(obj, torch.Tensor), without its slow path where the answer is certain. torch.Tensor's
 * metaclass is not `type`, so PyObject_IsInstance calls `__instancecheck__` (about 0.3 us) for every
 * object that is not exactly a Tensor, which compares the object's type and then its `__class__`. A
 * subclass instance is found in its type's MRO; an object whose `__class__` is object's own descriptor,
 * read by the generic attribute lookup (None, numbers, strings, containers, dtypes, devices, most
 * classes), has its type as its class; anything else (a proxy claiming another class) asks Python. */
static int
is_tensor(PyObject *obj)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type == (PyTypeObject *)tensor_type || PyType_IsSubtype(type, (PyTypeObject *)tensor_type))
        return 1;
#if PY_VERSION_HEX < 0x030E0000
    if (type->tp_getattro == PyObject_GenericGetAttr && _PyType_Lookup(type, str_class) == object_class)
        return 0;
#endif
    return PyObject_IsInstance(obj, tensor_type);
}

/* scan_args(args, kwargs, tmap, param_ids, buffer_ids, save) -> (parents, params, scrubbed, nested) | None
 *
 * `parents`: a tuple of (op index, position or keyword) for each argument an earlier op produced, in order
 * (positional arguments, then keyword ones);
 * `params`: a tuple of the addresses of the parameters among the arguments, in order; `scrubbed`: args with each top-level tensor replaced by TENSOR (None when values are saved or no
 * argument is a tensor); `nested`: whether a list or tuple argument holds tensors. None when an
 * argument needs the Python path (a buffer, a tensor no op produced). */
static PyObject *
scan_args(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "scan_args(args, kwargs, tmap, param_ids, buffer_ids, save)");
        return NULL;
    }
    if (!ready())
        return NULL;
    PyObject *args = argv[0], *kwargs = argv[1], *tmap = argv[2], *param_ids = argv[3], *buffer_ids = argv[4];
    int save = PyObject_IsTrue(argv[5]);
    if (save < 0)
        return NULL;
    if (!PyTuple_Check(args) || !PyDict_CheckExact(kwargs) || !PyDict_CheckExact(tmap) ||
        !PyDict_CheckExact(param_ids) || !PyAnySet_Check(buffer_ids))
        Py_RETURN_NONE;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    Py_ssize_t n_pos = PyTuple_GET_SIZE(positions);
    PyObject *parents = PyList_New(0);
    if (parents == NULL)
        return NULL;
    PyObject *params = PyList_New(0);
    if (params == NULL) {
        Py_DECREF(parents);
        return NULL;
    }
    PyObject *scrubbed = NULL;
    int nested = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        int tensor = is_tensor(a);
        if (tensor < 0)
            goto error;
        if (tensor) {
            if (!save) {
                if (scrubbed == NULL) {
                    scrubbed = PyTuple_New(n);
                    if (scrubbed == NULL)
                        goto error;
                    for (Py_ssize_t k = 0; k < n; k++)
                        PyTuple_SET_ITEM(scrubbed, k, Py_NewRef(PyTuple_GET_ITEM(args, k)));
                }
                Py_SETREF(((PyTupleObject *)scrubbed)->ob_item[i], Py_NewRef(placeholder));
            }
            PyObject *pos = i < n_pos ? Py_NewRef(PyTuple_GET_ITEM(positions, i)) : PyUnicode_FromFormat("%zd", i);
            if (pos == NULL)
                goto error;
            int rc = classify(a, pos, tmap, param_ids, buffer_ids, parents, params);
            Py_DECREF(pos);
            if (rc < 0)
                goto error;
            if (rc > 0)
                goto slow;
        }
        else if ((PyList_CheckExact(a) || PyTuple_CheckExact(a)) && PySequence_Fast_GET_SIZE(a) > 0) {
            int first = is_tensor(PySequence_Fast_GET_ITEM(a, 0));
            if (first < 0)
                goto error;
            if (!first)
                continue;
            nested = 1;
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(a); j++) {
                PyObject *b = Py_NewRef(PySequence_Fast_GET_ITEM(a, j));  /* held: isinstance may run Python */
                int bt = is_tensor(b);
                PyObject *pos = bt > 0 ? PyUnicode_FromFormat("%zd.%zd", i, j) : NULL;
                int rc = bt < 0 || (bt > 0 && pos == NULL) ? -1 :
                         bt == 0 ? 0 : classify(b, pos, tmap, param_ids, buffer_ids, parents, params);
                Py_XDECREF(pos);
                Py_DECREF(b);
                if (rc < 0)
                    goto error;
                if (rc > 0)
                    goto slow;
            }
        }
    }
    {  /* keyword tensors, by name, after the positional ones (not scrubbed here: scrub_kwargs does) */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            int tensor = is_tensor(value);
            if (tensor < 0)
                goto error;
            if (!tensor)
                continue;
            Py_INCREF(key);
            Py_INCREF(value);
            int rc = classify(value, key, tmap, param_ids, buffer_ids, parents, params);
            Py_DECREF(key);
            Py_DECREF(value);
            if (rc < 0)
                goto error;
            if (rc > 0)
                goto slow;
        }
    }
    {
        PyObject *ptuple = PyList_AsTuple(parents);
        PyObject *atuple = ptuple == NULL ? NULL : PyList_AsTuple(params);
        if (atuple != NULL)
            result = PyTuple_Pack(4, ptuple, atuple, scrubbed ? scrubbed : Py_None, nested ? Py_True : Py_False);
        Py_XDECREF(ptuple);
        Py_XDECREF(atuple);
    }
    Py_DECREF(parents);
    Py_DECREF(params);
    Py_XDECREF(scrubbed);
    return result;
slow:
    Py_DECREF(parents);
    Py_DECREF(params);
    Py_XDECREF(scrubbed);
    Py_RETURN_NONE;
error:
    Py_DECREF(parents);
    Py_DECREF(params);
    Py_XDECREF(scrubbed);
    return NULL;
}

static PyObject *str_version = NULL, *str_untyped_storage = NULL, *str_data_ptr = NULL;

/* Whether the error set is one of `exc` (cleared then), as an `except (...)` clause of the session's. */
static int
clear_if(PyObject *const *exc, int n)
{
    for (int i = 0; i < n; i++) {
        if (PyErr_ExceptionMatches(exc[i])) {
            PyErr_Clear();
            return 1;
        }
    }
    return 0;
}

/* `CaptureSession._storage_key(t)` (new reference): the address of the tensor's storage, or its id where it
 * has none (0, or a sparse, nested or other storage-less tensor). */
static PyObject *
storage_key(PyObject *t)
{
    PyObject *caught[3] = {PyExc_RuntimeError, PyExc_NotImplementedError, PyExc_TypeError};
    PyObject *storage = PyObject_CallMethodNoArgs(t, str_untyped_storage);
    PyObject *ptr = storage == NULL ? NULL : PyObject_CallMethodNoArgs(storage, str_data_ptr);
    Py_XDECREF(storage);
    if (ptr == NULL) {
        if (!clear_if(caught, 3))
            return NULL;
    }
    else {
        int zero_ptr = PyObject_Not(ptr);
        if (zero_ptr < 0) {
            Py_DECREF(ptr);
            return NULL;
        }
        if (!zero_ptr)
            return ptr;
        Py_DECREF(ptr);
    }
    return PyLong_FromVoidPtr(t);
}

/* `CaptureSession._save(idx, t)` on its tables (values, value_versions, shared_storage): the value, its version
 * (-1 for an inference tensor, which has none) and its index under its storage's key. 0, or -1 with an error. */
static int
save_value(PyObject *tables, PyObject *idx, PyObject *t)
{
    PyObject *values = PyTuple_GET_ITEM(tables, 0), *versions = PyTuple_GET_ITEM(tables, 1),
             *shared = PyTuple_GET_ITEM(tables, 2);
    if (PyDict_SetItem(values, idx, t) < 0)
        return -1;
    PyObject *caught[1] = {PyExc_RuntimeError};
    PyObject *version = PyObject_GetAttr(t, str_version);
    if (version == NULL) {
        if (!clear_if(caught, 1) || (version = PyLong_FromLong(-1)) == NULL)
            return -1;
    }
    int rc = PyDict_SetItem(versions, idx, version);
    Py_DECREF(version);
    PyObject *key = rc < 0 ? NULL : storage_key(t);
    if (key == NULL)
        return -1;
    PyObject *fresh = PyList_New(0);
    PyObject *held = fresh == NULL ? NULL : PyDict_SetDefault(shared, key, fresh);  /* borrowed */
    rc = held == NULL || !PyList_Check(held) ? -1 : PyList_Append(held, idx);
    if (held != NULL && !PyList_Check(held))
        PyErr_SetString(PyExc_TypeError, "shared_storage holds a list per storage");
    Py_XDECREF(fresh);
    Py_DECREF(key);
    return rc;
}

/* record_outputs(outs, record, records, metas, tmap, param_ids, save, value_tables) -> None
 *
 * For each output tensor: a copy of `record` (a raw record's fields, a tuple) with its tensor, its
 * shared metadata tuple and its output index filled in, appended to `records`; its tmap entry (the
 * tensor itself when values are saved, else a weak reference); when saved, the value in `value_tables`
 * (the session's values, value_versions and shared_storage, as `CaptureSession._save` keeps them). The caller
 * handles in-place calls (a written base, a buffer's value before the write). */
static PyObject *
record_outputs(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "record_outputs(outs, record, records, metas, tmap, param_ids, save, value_tables)");
        return NULL;
    }
    PyObject *outs = argv[0], *record = argv[1], *records = argv[2], *metas = argv[3], *tmap = argv[4],
             *param_ids = argv[5], *tables = argv[7];
    int save = PyObject_IsTrue(argv[6]);
    if (save < 0)
        return NULL;
    if (!PyTuple_CheckExact(outs) || !PyTuple_CheckExact(record) || !PyList_CheckExact(records) ||
        !PyDict_CheckExact(metas) || !PyDict_CheckExact(tmap) || !PyDict_CheckExact(param_ids) ||
        (save && !(PyTuple_CheckExact(tables) && PyTuple_GET_SIZE(tables) == 3 &&
                   PyDict_CheckExact(PyTuple_GET_ITEM(tables, 0)) && PyDict_CheckExact(PyTuple_GET_ITEM(tables, 1)) &&
                   PyDict_CheckExact(PyTuple_GET_ITEM(tables, 2))))) {
        PyErr_SetString(PyExc_TypeError, "record_outputs: unexpected container types");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(record);
    if (record_len == 0 || width != record_len) {
        PyErr_SetString(PyExc_ValueError, "record_outputs: the record is not the contract's width");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(outs); k++) {
        PyObject *t = PyTuple_GET_ITEM(outs, k);
        Py_ssize_t idx = PyList_GET_SIZE(records);
        PyObject *meta = PyTuple_New(4);
        if (meta == NULL)
            return NULL;
        PyObject *names[4] = {str_shape, str_dtype, str_device, str_requires_grad};
        for (int f = 0; f < 4; f++) {
            PyObject *v = PyObject_GetAttr(t, names[f]);
            if (v == NULL) {
                Py_DECREF(meta);
                return NULL;
            }
            PyTuple_SET_ITEM(meta, f, v);
        }
        PyObject *shared = PyDict_SetDefault(metas, meta, meta);  /* borrowed */
        if (shared == NULL) {
            Py_DECREF(meta);
            return NULL;
        }
        Py_INCREF(shared);
        Py_DECREF(meta);
        PyObject *rec = PyList_New(width);
        if (rec == NULL) {
            Py_DECREF(shared);
            return NULL;
        }
        for (Py_ssize_t f = 0; f < width; f++)
            PyList_SET_ITEM(rec, f, Py_NewRef(PyTuple_GET_ITEM(record, f)));
        Py_SETREF(((PyListObject *)rec)->ob_item[R_TENSOR], Py_NewRef(save ? t : Py_None));
        Py_SETREF(((PyListObject *)rec)->ob_item[R_META], shared);
        PyObject *k_obj = PyLong_FromSsize_t(k);
        if (k_obj == NULL) {
            Py_DECREF(rec);
            return NULL;
        }
        Py_SETREF(((PyListObject *)rec)->ob_item[R_OUT_IDX], k_obj);
        int rc = PyList_Append(records, rec);
        Py_DECREF(rec);
        if (rc < 0)
            return NULL;
        PyObject *tid = PyLong_FromVoidPtr(t);
        if (tid == NULL)
            return NULL;
        int is_param = PyDict_Contains(param_ids, tid);
        if (is_param != 0) {  /* a parameter or buffer returned as is keeps its parameter identity */
            Py_DECREF(tid);
            if (is_param < 0)
                return NULL;
            continue;
        }
        PyObject *idx_obj = PyLong_FromSsize_t(idx);
        PyObject *ref = idx_obj == NULL ? NULL : (save ? Py_NewRef(t) : PyWeakref_NewRef(t, NULL));
        PyObject *entry = ref == NULL ? NULL : PyTuple_Pack(2, idx_obj, ref);
        Py_XDECREF(ref);
        rc = entry == NULL ? -1 : PyDict_SetItem(tmap, tid, entry);
        Py_XDECREF(entry);
        Py_DECREF(tid);
        if (rc < 0) {
            Py_XDECREF(idx_obj);
            return NULL;
        }
        if (save && save_value(tables, idx_obj, t) < 0) {
            Py_DECREF(idx_obj);
            return NULL;
        }
        Py_DECREF(idx_obj);
    }
    Py_RETURN_NONE;
}

/* Append to `out` the op index of each tensor in `obj` that an earlier op produced, through exact lists,
 * tuples (namedtuples included) and dicts, in `walk.shallow_tensors` order. Returns 0, 1 when a
 * container needs the Python walk (another mapping or sequence type, nesting past 64), -1 on error. */
static int
collect_indices(PyObject *obj, PyObject *tmap, PyObject *out, int depth)
{
    int tensor = is_tensor(obj);
    if (tensor < 0)
        return -1;
    if (tensor) {
        PyObject *tid = PyLong_FromVoidPtr(obj);
        if (tid == NULL)
            return -1;
        PyObject *hit = PyDict_GetItemWithError(tmap, tid);
        Py_DECREF(tid);
        if (hit == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 2)
            return 1;
        if (held_object(PyTuple_GET_ITEM(hit, 1)) != obj)
            return 0;
        return PyList_Append(out, PyTuple_GET_ITEM(hit, 0));
    }
    if (PyList_Check(obj) || PyTuple_Check(obj) || PyDict_Check(obj)) {
        if (depth >= 64 || (PyList_Check(obj) && !PyList_CheckExact(obj)) || (PyDict_Check(obj) && !PyDict_CheckExact(obj)))
            return 1;
        if (PyDict_CheckExact(obj)) {
            PyObject *values = PyDict_Values(obj);
            if (values == NULL)
                return -1;
            int rc = 0;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values) && rc == 0; i++)
                rc = collect_indices(PyList_GET_ITEM(values, i), tmap, out, depth + 1);
            Py_DECREF(values);
            return rc;
        }
        PyObject *items = Py_NewRef(obj);  /* held, and each item held, while walked: an isinstance check
                                              may run Python code (a `__class__` property) */
        int rc = 0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items) && rc == 0; i++) {
            PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(items, i));
            rc = collect_indices(item, tmap, out, depth + 1);
            Py_DECREF(item);
        }
        Py_DECREF(items);
        return rc;
    }
    return 0;
}

/* The op indices (a tuple) of the tensors in `objs[0..n)` an earlier op produced, walked in turn; None
 * when a container needs the Python walk. */
static PyObject *
indices_of(PyObject *tmap, PyObject *const *objs, Py_ssize_t n)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = collect_indices(objs[i], tmap, out, 0);
        if (rc != 0) {
            Py_DECREF(out);
            if (rc < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *result = PyList_AsTuple(out);
    Py_DECREF(out);
    return result;
}

/* tensor_indices(tmap, *objs) -> tuple | None
 *
 * `CaptureSession._indices_of(shallow_tensors(obj) + ...)` over each of `objs` in turn: the op index of
 * every tensor in them an earlier op produced. None when a container needs the Python walk. */
static PyObject *
tensor_indices(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc < 1 || !PyDict_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "tensor_indices(tmap: dict, *objs)");
        return NULL;
    }
    if (!ready())
        return NULL;
    return indices_of(argv[0], argv + 1, argc - 1);
}

/* Whether `t`'s type is exactly one of `plain` (a tuple of types). */
static int
of_plain_type(PyObject *t, PyObject *plain)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plain); i++)
        if ((PyObject *)Py_TYPE(t) == PyTuple_GET_ITEM(plain, i))
            return 1;
    return 0;
}

/* `b.is_meta` (a getter that answers without building a device object): 1, 0, -1 on error. */
static int
is_meta_flag(PyObject *b)
{
    PyObject *flag = PyObject_GetAttr(b, str_is_meta);
    if (flag == NULL)
        return -1;
    int r = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return r;
}

/* Whether tensor `b` is on the meta device: `b.is_meta` for a plain tensor or parameter (`plain`: a tuple of
 * exact types), `b.device.type == "meta"` for a subclass. -1 on error. */
static int
on_meta(PyObject *b, PyObject *plain)
{
    if (of_plain_type(b, plain))
        return is_meta_flag(b);
    PyObject *device = PyObject_GetAttr(b, str_device);
    PyObject *kind = device == NULL ? NULL : PyObject_GetAttr(device, str_type);
    Py_XDECREF(device);
    if (kind == NULL)
        return -1;
    int r = PyObject_RichCompareBool(kind, str_meta, Py_EQ);
    Py_DECREF(kind);
    return r;
}

/* Whether `t` is of a `plain` type and on meta: 1, 0 (also for a subclass, which the Python hook looks at), -1 on
 * error. */
static int
plain_on_meta(PyObject *t, PyObject *plain)
{
    return of_plain_type(t, plain) ? is_meta_flag(t) : 0;
}

/* What `scan_constants` gathers over a call's arguments. */
typedef struct {
    PyObject *reals;   /* the tensors not on meta (a list; NULL: counted only, in n_reals) */
    Py_ssize_t n_reals, n;
    PyObject *first;   /* the first meta tensor (new reference) */
    int python_only;
} ConstantScan;

/* One tensor of `scan_constants`' pass; -1 on error. */
static int
scan_constant_tensor(PyObject *b, PyObject *plain, ConstantScan *s)
{
    int meta = on_meta(b, plain);
    if (meta < 0)
        return -1;
    s->n += 1;
    s->python_only = 0;
    if (!meta) {
        s->n_reals += 1;
        return s->reals == NULL ? 0 : PyList_Append(s->reals, b);
    }
    if (s->first == NULL)
        s->first = Py_NewRef(b);
    return 0;
}

/* One argument of `scan_constants` (a tensor, or a list or tuple looked into one level); -1 on error. */
static int
scan_constant_arg(PyObject *a, PyObject *plain, PyObject *is_plain, ConstantScan *s)
{
    int tensor = is_tensor(a);
    if (tensor < 0)
        return -1;
    if (tensor) {
        if (scan_constant_tensor(a, plain, s) < 0)
            return -1;
    }
    else if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
        PyObject *items = Py_NewRef(a);
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(items); j++) {
            PyObject *b = Py_NewRef(PySequence_Fast_GET_ITEM(items, j));
            int bt = is_tensor(b);
            int rc = bt < 0 ? -1 : bt > 0 ? scan_constant_tensor(b, plain, s) : 0;
            Py_DECREF(b);
            if (rc < 0) {
                Py_DECREF(items);
                return -1;
            }
        }
        Py_DECREF(items);
    }
    if (s->python_only) {
        PyObject *r = PyObject_CallOneArg(is_plain, a);
        if (r == NULL)
            return -1;
        int ok = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (ok < 0)
            return -1;
        if (!ok)
            s->python_only = 0;
    }
    return 0;
}

/* `scan_constants`' pass over positional then keyword arguments into `s` (its `first` to release); -1 on error. */
static int
scan_constant_args(PyObject *args, PyObject *kwargs, PyObject *plain, PyObject *is_plain, ConstantScan *s)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++)
        if (scan_constant_arg(PyTuple_GET_ITEM(args, i), plain, is_plain, s) < 0)
            return -1;
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0)
        return 0;
    PyObject *values = PyDict_Values(kwargs);
    if (values == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values) && rc == 0; i++)
        rc = scan_constant_arg(PyList_GET_ITEM(values, i), plain, is_plain, s);
    Py_DECREF(values);
    return rc;
}

/* Whether tensor `t` (NULL: none) has a known value in `known` (id -> (weak reference, ...)): 1, 0, -1 on error. */
static int
known_value(PyObject *t, PyObject *known)
{
    if (t == NULL)
        return 0;
    PyObject *tid = PyLong_FromVoidPtr(t);
    if (tid == NULL)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(known, tid);  /* borrowed */
    Py_DECREF(tid);
    if (hit == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(hit);
    PyObject *ref = PySequence_GetItem(hit, 0);
    PyObject *obj = ref == NULL ? NULL : PyObject_CallNoArgs(ref);
    Py_XDECREF(ref);
    Py_DECREF(hit);
    if (obj == NULL)
        return -1;
    int same = obj == t;
    Py_DECREF(obj);
    return same;
}

/* Whether `a` is, or holds through exact lists and tuples (as `known_values._known` looks), a tensor with no
 * known value in `known`: 1, 0 (also past 64 levels: the guard's Python looks), -1 on error. */
static int
holds_unknown(PyObject *a, PyObject *known, int depth)
{
    int tensor = is_tensor(a);
    if (tensor) {
        int k = tensor < 0 ? -1 : known_value(a, known);
        return k < 0 ? -1 : !k;
    }
    if (depth >= 64 || (!PyList_CheckExact(a) && !PyTuple_CheckExact(a)))
        return 0;
    PyObject *seq = Py_NewRef(a);
    int found = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && found == 0; i++) {
        PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        found = holds_unknown(item, known, depth + 1);
        Py_DECREF(item);
    }
    Py_DECREF(seq);
    return found;
}

/* scan_constants(args, kwargs, known, plain, is_plain) -> (reals, n, first_known, python_only)
 *
 * `weights_free.constants.ConstantLedger.scan`: in one pass over a call's arguments (top level, and
 * inside a list or tuple), the tensors not on meta, the number of tensors, whether the first meta
 * tensor has a known value (`known`: id -> (weak reference, value)), and whether every argument is
 * Python data (`is_plain`). */
static PyObject *
scan_constants(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 5 || !PyTuple_Check(argv[0]) || !PyDict_Check(argv[1]) || !PyDict_Check(argv[2]) ||
        !PyTuple_Check(argv[3])) {
        PyErr_SetString(PyExc_TypeError, "scan_constants(args: tuple, kwargs: dict, known: dict, plain: tuple, is_plain)");
        return NULL;
    }
    if (!ready())
        return NULL;
    ConstantScan s = {PyList_New(0), 0, 0, NULL, 1};
    if (s.reals == NULL)
        return NULL;
    int first_known = scan_constant_args(argv[0], argv[1], argv[3], argv[4], &s) < 0 ? -1 : known_value(s.first, argv[2]);
    Py_XDECREF(s.first);
    if (first_known < 0) {
        Py_DECREF(s.reals);
        return NULL;
    }
    return Py_BuildValue("(NnOO)", s.reals, s.n, first_known ? Py_True : Py_False, s.python_only ? Py_True : Py_False);
}

/* Whether `code` (keyed `key` = id(code)) is torch's or tracer's own, cached in `cache` (its code object
 * kept alive in `codes`): 1, 0, or -1 on error. */
static int
internal_code(PyCodeObject *code, PyObject *key, PyObject *cache, PyObject *codes, PyObject *prefixes)
{
    PyObject *known = PyDict_GetItemWithError(cache, key);
    if (known != NULL)
        return known == Py_True;
    if (PyErr_Occurred())
        return -1;
    PyObject *hit = PyObject_CallMethodOneArg(code->co_filename, str_startswith, prefixes);
    if (hit == NULL)
        return -1;
    int internal = hit == Py_True;
    Py_DECREF(hit);
    if (PyDict_SetItem(cache, key, internal ? Py_True : Py_False) < 0 || PyList_Append(codes, (PyObject *)code) < 0)
        return -1;
    return internal;
}

/* The shared (code, offset) tuple of a site (new reference), made on its first visit. */
static PyObject *
shared_site(PyCodeObject *code, PyObject *key, int lasti, PyObject *sites)
{
    PyObject *offset = PyLong_FromLong(lasti);
    PyObject *skey = offset == NULL ? NULL : PyTuple_Pack(2, key, offset);
    PyObject *found = NULL;
    if (skey != NULL) {
        found = PyDict_GetItemWithError(sites, skey);
        if (found != NULL) {
            Py_INCREF(found);
        }
        else if (!PyErr_Occurred()) {
            found = PyTuple_Pack(2, (PyObject *)code, offset);
            if (found != NULL && PyDict_SetItem(sites, skey, found) < 0)
                Py_CLEAR(found);
        }
    }
    Py_XDECREF(skey);
    Py_XDECREF(offset);
    return found;
}

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* What the frame walk found before, across captures: whether a code object is internal, and the shared
 * (code, offset) tuple of a site. Direct-mapped tables keyed by the code object's address (and the
 * offset); an entry holds its code object, so the address stays that object's while the entry lives (at
 * most CODE_SLOTS + SITE_SLOTS code objects are kept alive this way, until their slots are reused). A
 * hit costs no allocation and no dict lookup, where the session's dicts cost four allocations per call.
 * Valid for one `prefixes` object: another empties them. */
#define CODE_SLOTS 512
#define SITE_SLOTS 2048
static struct { PyObject *code; int internal; } code_slots[CODE_SLOTS];
static struct { PyObject *code; int offset; PyObject *site; } site_slots[SITE_SLOTS];
static PyObject *slots_prefixes = NULL;

static size_t
address_hash(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    return (size_t)((x >> 4) ^ (x >> 13));
}

static void
clear_slots(void)
{
    for (int i = 0; i < CODE_SLOTS; i++)
        Py_CLEAR(code_slots[i].code);
    for (int i = 0; i < SITE_SLOTS; i++) {
        Py_CLEAR(site_slots[i].code);
        Py_CLEAR(site_slots[i].site);
    }
}

/* CPython 3.11: walk the interpreter's own frames, which asks for no frame object (the public API makes
 * one for every frame it passes, for the caller's function and ours, on every recorded call). The
 * walk skips incomplete frames and reads the offset as PyFrame_GetBack and PyFrame_GetLasti do. */
static PyObject *
site_of_frames(int skip, PyObject *cache, PyObject *codes, PyObject *sites, PyObject *prefixes)
{
    if (prefixes != slots_prefixes) {
        clear_slots();
        Py_XSETREF(slots_prefixes, Py_NewRef(prefixes));
    }
    _PyInterpreterFrame *f = PyThreadState_Get()->cframe->current_frame;  /* the innermost Python function */
    if (f != NULL && skip)
        f = f->previous;
    for (; f != NULL; f = f->previous) {
        if (_PyFrame_IsIncomplete(f))
            continue;
        PyCodeObject *code = f->f_code;
        size_t h = address_hash(code);
        int internal;
        if (code_slots[h % CODE_SLOTS].code == (PyObject *)code) {
            internal = code_slots[h % CODE_SLOTS].internal;
        }
        else {
            PyObject *key = PyLong_FromVoidPtr(code);
            if (key == NULL)
                return NULL;
            internal = internal_code(code, key, cache, codes, prefixes);
            Py_DECREF(key);
            if (internal < 0)
                return NULL;
            PyObject *old = code_slots[h % CODE_SLOTS].code;  /* released once the slot is whole again */
            code_slots[h % CODE_SLOTS].code = Py_NewRef((PyObject *)code);
            code_slots[h % CODE_SLOTS].internal = internal;
            Py_XDECREF(old);
        }
        if (internal)
            continue;
        int lasti = _PyInterpreterFrame_LASTI(f);
        int offset = lasti < 0 ? -1 : lasti * (int)sizeof(_Py_CODEUNIT);
        size_t slot = (h ^ ((size_t)(unsigned)offset * 2654435761u)) % SITE_SLOTS;
        if (site_slots[slot].code == (PyObject *)code && site_slots[slot].offset == offset)
            return Py_NewRef(site_slots[slot].site);
        PyObject *key = PyLong_FromVoidPtr(code);
        PyObject *found = key == NULL ? NULL : shared_site(code, key, offset, sites);
        Py_XDECREF(key);
        if (found != NULL) {
            PyObject *old_code = site_slots[slot].code, *old_site = site_slots[slot].site;
            site_slots[slot].code = Py_NewRef((PyObject *)code);
            site_slots[slot].site = Py_NewRef(found);
            site_slots[slot].offset = offset;
            Py_XDECREF(old_code);
            Py_XDECREF(old_site);
        }
        return found;
    }
    Py_RETURN_NONE;
}
#endif

/* The shared (code, instruction offset) of the innermost frame outside torch and tracer, starting at the
 * innermost Python function (skip=0) or its caller (skip=1); None when every frame is internal. */
static PyObject *
find_site(int skip, PyObject *cache, PyObject *codes, PyObject *sites, PyObject *prefixes)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    if (!frame_objects)
        return site_of_frames(skip, cache, codes, sites, prefixes);
#endif
    PyFrameObject *here = PyEval_GetFrame();  /* borrowed */
    if (here == NULL)
        Py_RETURN_NONE;
    PyFrameObject *f = skip ? PyFrame_GetBack(here) : (PyFrameObject *)Py_NewRef(here);  /* new references */
    while (f != NULL) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *key = PyLong_FromVoidPtr(code);
        int internal = key == NULL ? -1 : internal_code(code, key, cache, codes, prefixes);
        PyObject *found = NULL;
        if (internal == 0)
            found = shared_site(code, key, PyFrame_GetLasti(f), sites);
        Py_XDECREF(key);
        Py_DECREF(code);
        if (internal != 1) {  /* the site, or an error */
            Py_DECREF(f);
            return found;
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_RETURN_NONE;
}

/* site(internal, codes, sites, prefixes) -> (code, offset) | None
 *
 * `CaptureSession._site`: the shared (code, instruction offset) of the innermost frame outside torch and
 * tracer, starting at the caller of the Python function that called this one. `internal` caches
 * id(code) -> whether the code is torch's or tracer's own; `codes` keeps those code objects alive;
 * `sites` maps (id(code), offset) -> the shared tuple. */
static PyObject *
site(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 4) {
        PyErr_SetString(PyExc_TypeError, "site(internal, codes, sites, prefixes)");
        return NULL;
    }
    PyObject *cache = argv[0], *codes = argv[1], *sites = argv[2], *prefixes = argv[3];
    if (!PyDict_CheckExact(cache) || !PyList_CheckExact(codes) || !PyDict_CheckExact(sites)) {
        PyErr_SetString(PyExc_TypeError, "site: unexpected container types");
        return NULL;
    }
    return find_site(1, cache, codes, sites, prefixes);
}

/* frame_objects(flag): make `site` walk frame objects through the public API even where the interpreter's
 * own frames can be read (tests compare the two walks). */
static PyObject *
set_frame_objects(PyObject *self, PyObject *arg)
{
    int flag = PyObject_IsTrue(arg);
    if (flag < 0)
        return NULL;
    frame_objects = flag;
    Py_RETURN_NONE;
}

/* ---- torch_function: a recorded call start to end (CaptureSession.__torch_function__'s common case) --- */

static PyObject *info_cache = NULL;     /* functions.INFO_CACHE: func -> FuncInfo */
static PyObject *peek_stack = NULL;     /* torch._C._functorch.peek_interpreter_stack */
static PyObject *scrub_deep_fn = NULL;  /* call_template.scrub_deep */
static PyObject *shallow_fn = NULL;     /* walk.shallow_tensors */
static PyObject *empty_dict = NULL, *empty_tuple = NULL, *empty_str = NULL, *zero = NULL, *one = NULL;

/* The capture state the kernel reads and writes (`kernel/contract.py` CaptureState, which the session
 * inherits): its slots, by name, in the contract's STATE_FIELDS order. `configure_state` reads their byte
 * offsets from the member descriptors and checks each one's name; nothing is read from an instance dict. Every
 * value read is a new reference held until the C is done with it, so Python code run in between (a kernel, a
 * guard, a tensor subclass) cannot free what the C still uses by replacing a slot. */
enum {
    A_SIMULATED, A_GUARD_FAST, A_GUARD, A_TMAP, A_PARAM_IDS, A_BUFFER_IDS, A_SAVE_VALUES, A_RECORDS, A_METAS,
    A_RECORD_SOURCE, A_SITE_CACHE, A_SITE_CODES, A_SITES, A_PREFIXES, A_VALUE_TABLES,
    A_SUSPENDED, A_EXITS, A_STACK, A_CALL_COUNTER, N_CALL_ATTRS,  /* what `torch_function` reads */
    A_CALL_COUNTS = N_CALL_ATTRS, A_FRAMES, A_MODULE_CALLS, N_ATTRS
};
static const char *attr_names[N_ATTRS] = {
    "simulated", "_guard_fast", "guard", "tmap", "param_ids", "buffer_ids", "save_values", "records", "_metas",
    "record_source", "_site_cache", "_site_codes", "_sites", "_prefixes", "_value_tables",
    "suspended", "exits", "stack", "call_counter", "call_counts", "frames", "module_calls"};
static PyTypeObject *state_type = NULL;  /* contract.CaptureState */
static Py_ssize_t state_off[N_ATTRS];
/* A guard's common case (contract.GuardFastPath), its slots in the contract's order. */
enum { G_KNOWN, G_PLAIN, G_IS_PLAIN, G_SCRUTINIZED, G_FROM_DATA, G_SIMULATED, G_GUARD, N_GUARD_FAST };
static const char *guard_fast_names[N_GUARD_FAST] = {
    "known", "plain", "is_plain", "scrutinized", "from_data", "simulated", "guard"};
static PyTypeObject *guard_fast_type = NULL;  /* contract.GuardFastPath */
static Py_ssize_t guard_fast_off[N_GUARD_FAST];
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* The offsets of `descriptors` (a slotted class's member descriptors), each checked to be named `names[i]`. */
static int
named_offsets(PyObject *type, PyObject *descriptors, const char *const *names, Py_ssize_t n, Py_ssize_t *out)
{
    if (!PyType_Check(type) || !PyTuple_Check(descriptors) || PyTuple_GET_SIZE(descriptors) != n ||
        slot_offsets(descriptors, out, n) < 0) {
        PyErr_Format(PyExc_ValueError, "configure_state: %R must have %zd object slots", type, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name = ((PyMemberDescrObject *)PyTuple_GET_ITEM(descriptors, i))->d_member->name;
        if (strcmp(name, names[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "configure_state: slot %zd of %R is '%s'; the C kernel reads '%s' there",
                         i, type, name, names[i]);
            return -1;
        }
    }
    return 0;
}

/* configure_state(CaptureState, its slot descriptors, GuardFastPath, its slot descriptors) */
static PyObject *
configure_state(PyObject *self, PyObject *args)
{
    PyObject *state, *state_descr, *fast, *fast_descr;
    Py_ssize_t s_off[N_ATTRS], g_off[N_GUARD_FAST];  /* nothing changes unless both fit */
    if (!PyArg_ParseTuple(args, "OOOO:configure_state", &state, &state_descr, &fast, &fast_descr))
        return NULL;
    if (named_offsets(state, state_descr, attr_names, N_ATTRS, s_off) < 0 ||
        named_offsets(fast, fast_descr, guard_fast_names, N_GUARD_FAST, g_off) < 0)
        return NULL;
    memcpy(state_off, s_off, sizeof(s_off));
    memcpy(guard_fast_off, g_off, sizeof(g_off));
    Py_XSETREF(state_type, (PyTypeObject *)Py_NewRef(state));
    Py_XSETREF(guard_fast_type, (PyTypeObject *)Py_NewRef(fast));
    Py_RETURN_NONE;
}

/* The state slots [first, last) of `session` as new references in `a`: 1, or 0 (none held) when the session is
 * no CaptureState or one of them is unset (the session is not set up for this path). */
static int
state_read(PyObject *session, PyObject **a, int first, int last)
{
    if (state_type == NULL || !PyObject_TypeCheck(session, state_type))
        return 0;
    for (int i = first; i < last; i++) {
        PyObject *v = SLOT(session, state_off[i]);
        if (v == NULL) {
            while (--i >= first)
                Py_CLEAR(a[i]);
            return 0;
        }
        a[i] = Py_NewRef(v);
    }
    return 1;
}

static void
state_release(PyObject **a, int first, int last)
{
    for (int i = first; i < last; i++)
        Py_CLEAR(a[i]);
}

/* session.<slot i> = value (a new reference taken; the old value released after the write). */
static void
state_set(PyObject *session, int i, PyObject *value)
{
    Py_XSETREF(SLOT(session, state_off[i]), Py_NewRef(value));
}
static PyObject *str_slow = NULL, *str_other = NULL, *str_inplace = NULL, *str_out = NULL;

/* configure_call(INFO_CACHE, peek_interpreter_stack, scrub_deep, shallow_tensors) */
static PyObject *
configure_call(PyObject *self, PyObject *args)
{
    PyObject *cache, *peek, *scrub, *shallow;
    if (!PyArg_ParseTuple(args, "O!OOO:configure_call", &PyDict_Type, &cache, &peek, &scrub, &shallow))
        return NULL;
    Py_XSETREF(info_cache, Py_NewRef(cache));
    Py_XSETREF(peek_stack, Py_NewRef(peek));
    Py_XSETREF(scrub_deep_fn, Py_NewRef(scrub));
    Py_XSETREF(shallow_fn, Py_NewRef(shallow));
    Py_RETURN_NONE;
}

/* Tensors in `obj` through exact tuples (namedtuples too), lists and dicts, appended to `found` in
 * `walk.shallow_tensors`' order. 0, 1 when the Python walk must run (a list or dict subclass, nesting
 * past 64), -1 on error. */
static int
shallow_into(PyObject *obj, PyObject *found, int depth)
{
    int tensor = is_tensor(obj);
    if (tensor)
        return tensor < 0 ? -1 : PyList_Append(found, obj);
    if (depth >= 64)
        return 1;
    if (PyTuple_Check(obj) || PyList_CheckExact(obj)) {
        PyObject *seq = Py_NewRef(obj);
        int rc = 0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && rc == 0; i++) {
            PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
            rc = shallow_into(item, found, depth + 1);
            Py_DECREF(item);
        }
        Py_DECREF(seq);
        return rc;
    }
    if (PyDict_CheckExact(obj)) {
        PyObject *values = PyDict_Values(obj);
        if (values == NULL)
            return -1;
        int rc = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values) && rc == 0; i++)
            rc = shallow_into(PyList_GET_ITEM(values, i), found, depth + 1);
        Py_DECREF(values);
        return rc;
    }
    return (PyList_Check(obj) || PyDict_Check(obj)) ? 1 : 0;
}

/* The output tensors of a call's tuple or list result, as a tuple (new reference). */
static PyObject *
output_tensors(PyObject *out)
{
    PyObject *found = PyList_New(0);
    if (found == NULL)
        return NULL;
    int rc = shallow_into(out, found, 0);
    if (rc == 1) {
        Py_SETREF(found, PyObject_CallOneArg(shallow_fn, out));
        rc = found == NULL ? -1 : 0;
    }
    PyObject *outs = rc < 0 ? NULL : PySequence_Tuple(found);
    Py_XDECREF(found);
    return outs;
}

/* call_template.scrub_kwargs: `kwargs` with each tensor replaced by TENSOR. */
static PyObject *
scrubbed_kwargs(PyObject *kwargs)
{
    PyObject *out = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (out != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        int tensor = is_tensor(value);
        if (tensor < 0 || PyDict_SetItem(out, key, tensor ? placeholder : value) < 0)
            Py_CLEAR(out);
    }
    return out;
}

/* call_template._scrub: `a` with each tensor replaced by TENSOR, through exact lists and tuples (new
 * reference; NULL with *deep set past 64 levels, where the Python walk takes over). */
static PyObject *
scrubbed_item(PyObject *a, int depth, int *deep)
{
    int tensor = is_tensor(a);
    if (tensor)
        return tensor < 0 ? NULL : Py_NewRef(placeholder);
    int list = PyList_CheckExact(a);
    if (!list && !PyTuple_CheckExact(a))
        return Py_NewRef(a);
    if (depth >= 64) {
        *deep = 1;
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
    PyObject *out = list ? PyList_New(n) : PyTuple_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        if (list && i >= PyList_GET_SIZE(a))  /* a list changed by a tensor's __instancecheck__: the Python walk */
            *deep = 1;
        PyObject *b = *deep ? NULL : Py_NewRef(PySequence_Fast_GET_ITEM(a, i));
        PyObject *item = b == NULL ? NULL : scrubbed_item(b, depth + 1, deep);
        Py_XDECREF(b);
        if (item == NULL)
            Py_CLEAR(out);
        else if (list)
            PyList_SET_ITEM(out, i, item);
        else
            PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

/* call_template.scrub_deep(args): the top-level tuple with tensors inside lists and tuples replaced too. */
static PyObject *
scrubbed_deep(PyObject *args)
{
    int deep = 0;
    PyObject *out = PyTuple_New(PyTuple_GET_SIZE(args));
    for (Py_ssize_t i = 0; out != NULL && i < PyTuple_GET_SIZE(args); i++) {
        PyObject *item = scrubbed_item(PyTuple_GET_ITEM(args, i), 0, &deep);
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, item);
    }
    if (out == NULL && deep && !PyErr_Occurred())
        return PyObject_CallOneArg(scrub_deep_fn, args);
    return out;
}

/* The raw record of a call that ran (the fields `record_outputs` copies per output tensor). */
static PyObject *
call_record(PyObject *session, PyObject **a, PyObject *info, PyObject *scanned, PyObject *func, PyObject *args,
            PyObject *kwargs, PyObject *outs, int save)
{
    PyObject *site_obj = NULL, *counter = NULL, *n = NULL, *spec = NULL, *s_args = NULL, *s_kwargs = NULL, *rec = NULL;
    int record_source = PyObject_IsTrue(a[A_RECORD_SOURCE]);
    if (record_source < 0)
        return NULL;
    site_obj = record_source ? find_site(0, a[A_SITE_CACHE], a[A_SITE_CODES], a[A_SITES], a[A_PREFIXES])
                             : Py_NewRef(Py_None);
    counter = site_obj == NULL ? NULL : PyNumber_Add(a[A_CALL_COUNTER], one);
    if (counter == NULL)
        goto end;
    state_set(session, A_CALL_COUNTER, counter);
    n = PyLong_FromSsize_t(PyTuple_GET_SIZE(outs));
    if (n == NULL)
        goto end;
    if (save) {
        spec = kwargs == Py_None ? NULL : Py_NewRef(kwargs);
        if (spec == NULL && (spec = PyDict_New()) == NULL)
            goto end;
        Py_SETREF(spec, PyTuple_Pack(3, func, args, spec));
        s_args = Py_NewRef(Py_None);
        s_kwargs = Py_NewRef(Py_None);
    }
    else {
        spec = Py_NewRef(Py_None);
        PyObject *scrubbed = PyTuple_GET_ITEM(scanned, 2);
        s_args = PyTuple_GET_ITEM(scanned, 3) == Py_True ? scrubbed_deep(args)
                 : Py_NewRef(scrubbed != Py_None ? scrubbed : args);
        s_kwargs = kwargs != Py_None && PyDict_GET_SIZE(kwargs) > 0 ? scrubbed_kwargs(kwargs) : Py_NewRef(Py_None);
    }
    if (spec == NULL || s_args == NULL || s_kwargs == NULL)
        goto end;
    rec = PyTuple_New(record_len);
    if (rec == NULL)
        goto end;
    PyObject *fields[N_RECORD_FIELDS] = {
        [F_INFO] = info, [F_PARENTS] = PyTuple_GET_ITEM(scanned, 0), [F_TENSOR] = Py_None, [F_META] = Py_None,
        [F_CALL] = counter, [F_OUT_IDX] = zero, [F_N_OUT] = n, [F_STACK] = a[A_STACK],
        [F_PARAMS] = PyTuple_GET_ITEM(scanned, 1), [F_WRITES] = empty_tuple, [F_INPLACE] = Py_False,
        [F_SITE] = site_obj, [F_IO] = empty_str, [F_CALLSPEC] = spec, [F_ARGS] = s_args, [F_KWARGS] = s_kwargs};
    for (int f = 0; f < N_RECORD_FIELDS; f++)  /* at the contract's positions */
        PyTuple_SET_ITEM(rec, record_pos[f], Py_NewRef(fields[f]));
end:
    Py_XDECREF(site_obj);
    Py_XDECREF(counter);
    Py_XDECREF(n);
    Py_XDECREF(spec);
    Py_XDECREF(s_args);
    Py_XDECREF(s_kwargs);
    return rec;
}

/* ---- a weights-free guard's common case (weights_free.guard.StructureOnlyGuard.common_case) ----------
 *
 * `fast`: (known, plain, is_plain, scrutinized kinds, FROM_PYTHON_DATA, the guard's instance dict, the
 * simulated device's common case or None). That is (SimulatedDevice.common_case): (the kinds that move to a
 * device by name, the kinds that may take a device positionally, the types that may name one, the answers
 * to device reads of a meta tensor (a getter's descriptor or get_device -> answer), a getter's type,
 * get_device). */
enum { S_MOVES, S_DEVICE_ARGS, S_DEVICE_LIKE, S_ANSWERS, S_GETTER, S_GET_DEVICE, N_SIMULATED };
static PyObject *str_constant_call = NULL, *str_mixed = NULL, *str_after_call = NULL, *str_failed = NULL,
    *str_device_kw = NULL, *str_self = NULL, *str_module_name = NULL, *str_tracer_prefix = NULL;

/* The session's `_guard_fast` read into `gf` (new references) when it is a guard's common case the C can check
 * (a contract.GuardFastPath with every slot set): 1, else 0 with nothing held (the Python hook checks every call). */
static int
guard_fast_read(PyObject *fast, PyObject **gf)
{
    if (guard_fast_type == NULL || !Py_IS_TYPE(fast, guard_fast_type))
        return 0;
    for (int i = 0; i < N_GUARD_FAST; i++)
        if (SLOT(fast, guard_fast_off[i]) == NULL)
            return 0;
    PyObject *sim = SLOT(fast, guard_fast_off[G_SIMULATED]);
    if (sim != Py_None && !(PyTuple_CheckExact(sim) && PyTuple_GET_SIZE(sim) == N_SIMULATED &&
                            PyDict_CheckExact(PyTuple_GET_ITEM(sim, S_ANSWERS))))
        return 0;
    for (int i = 0; i < N_GUARD_FAST; i++)
        gf[i] = Py_NewRef(SLOT(fast, guard_fast_off[i]));
    return 1;
}

/* `SimulatedDevice.read` for the session's own mode: the simulated answer (new reference) when `func` reads
 * the device of a meta tensor of a `plain` type for the model's code, or NULL with *unread set when the call is no such
 * read and the C hook goes on, or NULL with *unread 0 (and no error set) when the Python hook must look (a
 * tensor subclass, a real tensor, a read by the tracer's own code); NULL with an error. */
static PyObject *
device_read(PyObject *sim, PyObject *plain, PyObject *func, PyObject *args, int *unread)
{
    *unread = 0;
    PyObject *key;
    if (func == PyTuple_GET_ITEM(sim, S_GET_DEVICE))
        key = Py_NewRef(func);
    else if ((PyObject *)Py_TYPE(func) == PyTuple_GET_ITEM(sim, S_GETTER)) {
        if ((key = PyObject_GetAttr(func, str_self)) == NULL)
            return NULL;
    }
    else {
        *unread = 1;
        return NULL;
    }
    PyObject *answer = PyDict_GetItemWithError(PyTuple_GET_ITEM(sim, S_ANSWERS), key);  /* borrowed */
    Py_DECREF(key);
    if (answer == NULL) {  /* another property (shape, dtype): no device read */
        *unread = !PyErr_Occurred();
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) == 0)
        return NULL;
    PyObject *t = PyTuple_GET_ITEM(args, 0);
    int meta = plain_on_meta(t, plain);
    if (meta <= 0)
        return NULL;  /* an error, a subclass, or a real tensor's device: the Python hook runs the read */
    PyObject *globals = PyEval_GetGlobals();  /* the frame that read the device (borrowed) */
    PyObject *name = globals == NULL ? NULL : PyDict_GetItemWithError(globals, str_module_name);
    if (PyErr_Occurred())
        return NULL;
    if (name != NULL && PyUnicode_Check(name) && PyUnicode_Tailmatch(name, str_tracer_prefix, 0, PY_SSIZE_T_MAX, -1))
        return NULL;  /* the capture itself reads it: it must see meta (`_read_by_tracer`) */
    return Py_NewRef(answer);
}

/* Whether a call may name the simulated device (`SimulatedDevice.on_meta` may not return None): 1, 0, -1 on
 * error. A kind that moves to a device by name; a `device=` keyword that is not None; a kind that takes a
 * device positionally, with a device or a string after its first argument. */
static int
names_device(PyObject *sim, PyObject *kind, PyObject *args, PyObject *kwargs)
{
    int hit = PySet_Contains(PyTuple_GET_ITEM(sim, S_MOVES), kind);
    if (hit != 0)
        return hit;
    PyObject *device = kwargs == NULL ? NULL : PyDict_GetItemWithError(kwargs, str_device_kw);
    if (device == NULL && PyErr_Occurred())
        return -1;
    if (device != NULL && device != Py_None)
        return 1;
    hit = PySet_Contains(PyTuple_GET_ITEM(sim, S_DEVICE_ARGS), kind);
    if (hit < 0)
        return -1;
    for (Py_ssize_t i = 1; hit > 0 && i < PyTuple_GET_SIZE(args); i++) {
        int like = PyObject_IsInstance(PyTuple_GET_ITEM(args, i), PyTuple_GET_ITEM(sim, S_DEVICE_LIKE));
        if (like != 0)
            return like;
    }
    return 0;
}

/* Whether the guard's `before_call` would pass the call as it is, setting only what the common case sets
 * (`_constant_call` False, `_mixed` None): 1, 0 (the guard's Python checks it), -1 on error. The checks of
 * `before_call`'s first branch: no value read, no random or shape-only kind, no constant from Python data,
 * no real tensor, and some argument that is not Python data; no known first value, or another tensor with
 * none (the output's value is then unknown: `_checked` lets the call run as made); with a simulated device,
 * no argument that may name it (`SimulatedDevice.on_meta` returns None). */
static int
guard_passes(PyObject **gf, PyObject *info, PyObject *args, PyObject *kwargs)
{
    PyObject *kind = PyTuple_GET_ITEM(info, 0), *qualname = PyTuple_GET_ITEM(info, 1);
    if (PyTuple_GET_ITEM(info, 4) != Py_False)  /* a value read */
        return 0;
    int hit = PySet_Contains(gf[G_SCRUTINIZED], kind);
    if (hit == 0)
        hit = PySet_Contains(gf[G_FROM_DATA], qualname);
    PyObject *sim = gf[G_SIMULATED];
    if (hit == 0 && sim != Py_None)
        hit = names_device(sim, kind, args, kwargs);
    if (hit != 0)
        return hit < 0 ? -1 : 0;
    ConstantScan s = {NULL, 0, 0, NULL, 1};
    int known = scan_constant_args(args, kwargs, gf[G_PLAIN], gf[G_IS_PLAIN],
                                   &s) < 0 ? -1 : known_value(s.first, gf[G_KNOWN]);
    Py_XDECREF(s.first);
    if (known < 0 || s.n_reals || s.python_only)
        return known < 0 ? -1 : 0;
    if (known) {  /* the first tensor's value is known: the call's is not when another's is not (`values_for`) */
        int unknown = holds_unknown(args, gf[G_KNOWN], 0);
        PyObject *values = unknown == 0 && kwargs != NULL && PyDict_GET_SIZE(kwargs) ? PyDict_Values(kwargs) : NULL;
        if (values != NULL) {
            unknown = holds_unknown(values, gf[G_KNOWN], 0);
            Py_DECREF(values);
        }
        else if (PyErr_Occurred())
            return -1;
        if (unknown <= 0)
            return unknown;
    }
    /* as the guard's common case does: set through the guard's attributes (its own setattr), never its dict */
    if (PyObject_SetAttr(gf[G_GUARD], str_constant_call, Py_False) < 0 ||
        PyObject_SetAttr(gf[G_GUARD], str_mixed, Py_None) < 0)
        return -1;
    return 1;
}

/* The guard's `after_call` for a call's outputs: nothing to check when each is a plain tensor on meta, else
 * the guard's Python (which raises for a real tensor it does not admit). 0, or -1 with the error set. */
static int
guard_after(PyObject *guard, PyObject **gf, PyObject *session, PyObject *info, PyObject *outs)
{
    PyObject *plain = gf[G_PLAIN];
    int checked = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outs) && checked; i++) {
        PyObject *t = PyTuple_GET_ITEM(outs, i);
        int meta = plain_on_meta(t, plain);
        if (meta < 0)
            return -1;
        checked = meta;
    }
    if (checked)
        return 0;
    PyObject *listed = PySequence_List(outs);
    PyObject *done = listed == NULL ? NULL : PyObject_CallMethodObjArgs(guard, str_after_call, info, listed, session, NULL);
    Py_XDECREF(listed);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* A recorded call that raised: `session._failed` notes where, then asks the guard (`guard`: NULL without one),
 * which returns the output it substitutes (a declared meta fallback) or raises (typed where it types it). */
static PyObject *
failed_call(PyObject *session, PyObject *info, PyObject *guard, PyObject *func, PyObject *args, PyObject *kwargs)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL) {
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *call_kwargs = kwargs == Py_None ? PyDict_New() : Py_NewRef(kwargs);
    PyObject *out = call_kwargs == NULL ? NULL : PyObject_CallMethodObjArgs(session, str_failed, value, info,
                                                                            guard ? guard : Py_None, func, args,
                                                                            call_kwargs, NULL);
    Py_XDECREF(call_kwargs);
    Py_XDECREF(type);
    Py_DECREF(value);
    Py_XDECREF(tb);
    return out;
}

/* torch_function(session, func, types, args=(), kwargs=None)
 *
 * The session's function mode hook, bound to the session as its `__torch_function__` for the forward.
 * A call no capture mode checks (no simulated device, nothing suspended, no functorch transform, no
 * tensor that left torch), that writes nothing in place, whose tensor arguments are all earlier ops'
 * outputs or parameters, and that the session's guard (if any) passes in its common case
 * (`_guard_fast`, from `CallGuard.common_case`), is recorded here as `CaptureSession._torch_function_py`
 * records it; every other call goes to that method before anything runs. */
static PyObject *
torch_function(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc < 3 || argc > 5) {
        PyErr_SetString(PyExc_TypeError, "torch_function(session, func, types, args=(), kwargs=None)");
        return NULL;
    }
    if (info_cache == NULL || !ready()) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._hotpath.torch_function is not configured");
        return NULL;
    }
    PyObject *session = argv[0], *func = argv[1], *types = argv[2];
    PyObject *args = argc > 3 ? argv[3] : empty_tuple, *kwargs = argc > 4 ? argv[4] : Py_None;
    PyObject *a[N_CALL_ATTRS] = {NULL}, *info = NULL, *scanned = NULL, *out = NULL, *outs = NULL, *result = NULL;
    PyObject *gf[N_GUARD_FAST] = {NULL};  /* the guard's common case, held for the call */
    int has_fast = 0;
    if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_CheckExact(kwargs)))
        goto slow;
    if (!state_read(session, a, 0, N_CALL_ATTRS))  /* every slot the call reads, each held for it */
        goto slow;
    int suspended = PyObject_IsTrue(a[A_SUSPENDED]);
    if (suspended < 0)
        goto done;
    if (suspended)
        goto slow;
    has_fast = a[A_GUARD_FAST] != Py_None && guard_fast_read(a[A_GUARD_FAST], gf);
    if (a[A_SIMULATED] != Py_None) {  /* the model's device reads answered as `SimulatedDevice.read` answers them */
        PyObject *sim = has_fast ? gf[G_SIMULATED] : NULL;
        if (sim == NULL || sim == Py_None)  /* no simulated device in the guard's common case: the Python hook */
            goto slow;
        int unread;
        result = device_read(sim, gf[G_PLAIN], func, args, &unread);
        if (result != NULL || PyErr_Occurred())
            goto done;
        if (!unread)
            goto slow;
    }
    PyObject *level = PyObject_CallNoArgs(peek_stack);  /* inside torch.vmap / torch.func: the Python path */
    if (level == NULL)
        goto done;
    Py_DECREF(level);
    if (level != Py_None)
        goto slow;
    info = PyDict_GetItemWithError(info_cache, func);
    if (info == NULL) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError))  /* TypeError: an unhashable callable */
                goto done;
            PyErr_Clear();
        }
        goto slow;  /* first call of `func`: the Python path describes it */
    }
    Py_INCREF(info);
    if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 4)
        goto slow;
    PyObject *call_kwargs = kwargs == Py_None ? NULL : kwargs;
    if (PyTuple_GET_ITEM(info, 3) == Py_True) {  /* metadata only: run it, record nothing */
        result = PyObject_Call(func, args, call_kwargs);
        goto done;
    }
    if (!PyList_CheckExact(a[A_EXITS]) || PyList_GET_SIZE(a[A_EXITS]) != 0)
        goto slow;
    if (a[A_GUARD] != Py_None && !has_fast)
        goto slow;  /* a guard with no common case in C (a chain, distributed): its Python checks every call */
    if (PyTuple_GET_ITEM(info, 2) != Py_False)  /* writes in place */
        goto slow;
    if (call_kwargs != NULL && PyDict_GET_SIZE(call_kwargs) > 0) {
        PyObject *flag = PyDict_GetItemWithError(call_kwargs, str_inplace);
        PyObject *target = flag == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(call_kwargs, str_out);
        if (PyErr_Occurred())
            goto done;
        if (flag == Py_True || (target != NULL && target != Py_None))
            goto slow;
    }
    if (a[A_GUARD] != Py_None) {
        int passes = guard_passes(gf, info, args, call_kwargs);
        if (passes < 0)
            goto done;
        if (!passes)
            goto slow;
    }
    int save = PyObject_IsTrue(a[A_SAVE_VALUES]);
    if (save < 0)
        goto done;
    PyObject *scan_argv[6] = {args, call_kwargs ? call_kwargs : empty_dict, a[A_TMAP], a[A_PARAM_IDS], a[A_BUFFER_IDS],
                              a[A_SAVE_VALUES]};
    scanned = scan_args(NULL, scan_argv, 6);
    if (scanned == NULL)
        goto done;
    if (scanned == Py_None)
        goto slow;
    /* The call runs: from here on nothing goes to the Python path. */
    PyObject *guard = a[A_GUARD] != Py_None ? a[A_GUARD] : NULL;
    out = PyObject_Call(func, args, call_kwargs);
    if (out == NULL && (out = failed_call(session, info, guard, func, args, kwargs)) == NULL)
        goto done;
    int tensor = is_tensor(out);
    if (tensor < 0)
        goto done;
    if (tensor) {
        outs = PyTuple_Pack(1, out);
    }
    else if (PyTuple_Check(out) || PyList_CheckExact(out)) {
        outs = output_tensors(out);
        if (outs != NULL && PyTuple_GET_SIZE(outs) == 0) {  /* a sequence without a tensor (tolist): as below */
            result = PyObject_CallMethodObjArgs(session, str_other, info, args, out, NULL);
            goto done;
        }
    }
    else {  /* no tensor out (a number, None, an array that left torch): the session notes what it must */
        result = PyObject_CallMethodObjArgs(session, str_other, info, args, out, NULL);
        goto done;
    }
    if (outs == NULL)
        goto done;
    /* What changes during the forward, read again: the call ran Python code (a module's forward inside a
     * kernel's Python, a guard), which may have moved the stack or the counter. */
    state_release(a, A_SUSPENDED, N_CALL_ATTRS);
    if (!state_read(session, a, A_SUSPENDED, N_CALL_ATTRS)) {
        PyErr_SetString(PyExc_RuntimeError, "the capture session lost its state during a call");
        goto done;
    }
    PyObject *rec = call_record(session, a, info, scanned, func, args, kwargs, outs, save);
    if (rec != NULL) {
        PyObject *rargv[8] = {outs, rec, a[A_RECORDS], a[A_METAS], a[A_TMAP], a[A_PARAM_IDS], a[A_SAVE_VALUES],
                              a[A_VALUE_TABLES]};
        PyObject *done_rec = record_outputs(NULL, rargv, 8);
        if (done_rec != NULL && (guard == NULL || guard_after(guard, gf, session, info, outs) == 0))
            result = Py_NewRef(out);
        Py_XDECREF(done_rec);
    }
    Py_XDECREF(rec);
    goto done;
slow:
    Py_CLEAR(info);
    Py_CLEAR(scanned);
    state_release(a, 0, N_CALL_ATTRS);
    state_release(gf, 0, N_GUARD_FAST);
    return PyObject_CallMethodObjArgs(session, str_slow, func, types, args, kwargs, NULL);
done:
    Py_XDECREF(info);
    Py_XDECREF(scanned);
    Py_XDECREF(out);
    Py_XDECREF(outs);
    state_release(a, 0, N_CALL_ATTRS);
    state_release(gf, 0, N_GUARD_FAST);
    return result;
}

/* ---- ScopedForward: a module's forward run inside its scope (ModuleScopes._wrap's wrapper) ---------- */

static PyObject *call_impl_code = NULL, *call_impl_inner_code = NULL;  /* nn.Module._call_impl's code objects */
static PyTypeObject *stack_type = NULL;  /* ir.ModuleStack */
static Py_ssize_t stack_offsets[5];      /* parent, entry, depth, _tuple, _hash */
static PyObject *str_indices_in = NULL,
    *str_depth = NULL, *str_name = NULL, *str_qualname = NULL;

typedef struct {
    PyObject_HEAD
    PyObject *session, *module, *addr, *inner;
} ScopedForward;

/* configure_scopes(Module._call_impl's code, its inner closure's code, ModuleStack, its slot descriptors) */
static PyObject *
configure_scopes(PyObject *self, PyObject *args)
{
    PyObject *impl, *inner, *stack, *descr;
    if (!PyArg_ParseTuple(args, "OOO!O!:configure_scopes", &impl, &inner, &PyType_Type, &stack, &PyTuple_Type, &descr))
        return NULL;
    if (PyTuple_GET_SIZE(descr) != 5 || slot_offsets(descr, stack_offsets, 5) < 0) {
        PyErr_SetString(PyExc_TypeError, "configure_scopes: ModuleStack must have the slots parent, entry, depth, _tuple, _hash");
        return NULL;
    }
    Py_XSETREF(call_impl_code, Py_NewRef(impl));
    Py_XSETREF(call_impl_inner_code, Py_NewRef(inner));
    Py_XSETREF(stack_type, (PyTypeObject *)Py_NewRef(stack));
    Py_RETURN_NONE;
}

/* Whether the innermost Python function (the one calling the wrapper) is nn.Module.__call__'s: a
 * forward called directly (`module.forward(x)`) is not a module call. */
static int
called_as_module(void)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    if (!frame_objects) {
        _PyInterpreterFrame *f = PyThreadState_Get()->cframe->current_frame;
        PyObject *code = f == NULL ? NULL : (PyObject *)f->f_code;
        return code != NULL && (code == call_impl_code || code == call_impl_inner_code);
    }
#endif
    PyFrameObject *f = PyEval_GetFrame();  /* borrowed */
    if (f == NULL)
        return 0;
    PyCodeObject *code = PyFrame_GetCode(f);
    int yes = (PyObject *)code == call_impl_code || (PyObject *)code == call_impl_inner_code;
    Py_DECREF(code);
    return yes;
}

/* ModuleStack(parent, (addr, call)): `parent.push(addr, call)` without its Python frames. */
static PyObject *
push_stack(PyObject *parent, PyObject *addr, PyObject *call)
{
    PyObject *depth = PyObject_GetAttr(parent, str_depth);
    PyObject *values[5] = {Py_NewRef(parent), PyTuple_Pack(2, addr, call),
                           depth == NULL ? NULL : PyNumber_Add(depth, one), Py_NewRef(Py_None), Py_NewRef(Py_None)};
    Py_XDECREF(depth);
    if (values[1] == NULL || values[2] == NULL) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    return new_slotted(stack_type, stack_offsets, values, 5);
}

/* `ModuleScopes._indices_in(*objs)` for one or two objects: `indices_of`, or the session's Python walk
 * where it answers None. */
static PyObject *
indices_in(PyObject *session, PyObject *tmap, PyObject *const *objs, Py_ssize_t n)
{
    PyObject *found = indices_of(tmap, objs, n);
    if (found != Py_None)
        return found;
    Py_DECREF(found);
    return PyObject_VectorcallMethod(str_indices_in, (PyObject *[]){session, objs[0], n > 1 ? objs[1] : NULL},
                                     1 + n, NULL);
}

/* `ModuleScopes._leave`: pop to this call's frame (restoring the stack each pop), then record the call. */
static int
leave_scope(PyObject *session, PyObject *frame, PyObject *output)
{
    int rc = -1;
    PyObject *a[N_ATTRS] = {NULL};  /* held for the call: `indices_in` may run Python */
    int have = state_read(session, a, A_TMAP, A_TMAP + 1) && state_read(session, a, A_RECORDS, A_RECORDS + 1) &&
               state_read(session, a, A_FRAMES, A_MODULE_CALLS + 1);
    PyObject *frames = a[A_FRAMES], *tmap = a[A_TMAP], *records = a[A_RECORDS], *calls = a[A_MODULE_CALLS];
    PyObject *outputs = NULL, *entry = NULL, *last = NULL;
    if (!have || !PyList_CheckExact(frames) || !PyList_CheckExact(records) || !PyDict_CheckExact(calls)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the capture session lost its module frames");
        goto end;
    }
    int found = 0;
    while (PyList_GET_SIZE(frames) > 0) {
        Py_ssize_t n = PyList_GET_SIZE(frames);
        PyObject *top = Py_NewRef(PyList_GET_ITEM(frames, n - 1));
        if (PyList_SetSlice(frames, n - 1, n, NULL) < 0 || !PyList_Check(top) || PyList_GET_SIZE(top) < 6) {
            Py_DECREF(top);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "a module frame is not the session's");
            goto end;
        }
        state_set(session, A_STACK, PyList_GET_ITEM(top, 4));
        found = top == frame;
        Py_DECREF(top);
        if (found)
            break;
    }
    if (!found) {
        rc = 0;
        goto end;
    }
    outputs = output == Py_None ? Py_NewRef(empty_tuple) : indices_in(session, tmap, &output, 1);
    last = PyLong_FromSsize_t(PyList_GET_SIZE(records) - 1);
    if (outputs == NULL || last == NULL)
        goto end;
    entry = PyTuple_Pack(5, PyList_GET_ITEM(frame, 1), PyList_GET_ITEM(frame, 2), outputs, PyList_GET_ITEM(frame, 3), last);
    if (entry == NULL)
        goto end;
    PyObject *fresh = PyList_New(0);
    PyObject *list = fresh == NULL ? NULL : PyDict_SetDefault(calls, PyList_GET_ITEM(frame, 0), fresh);  /* borrowed */
    Py_XDECREF(fresh);
    if (list != NULL && PyList_Check(list))
        rc = PyList_Append(list, entry);
    else if (list != NULL)
        PyErr_SetString(PyExc_TypeError, "module_calls entries must be lists");
end:
    Py_XDECREF(outputs);
    Py_XDECREF(entry);
    Py_XDECREF(last);
    state_release(a, 0, N_ATTRS);
    return rc;
}

/* The module call: open its scope (`ModuleScopes._enter` for a module without a fused fast path), run
 * the forward, close the scope also when the forward raises (`_leave`), return the output. */
static PyObject *
scoped_call(ScopedForward *self, PyObject *args, PyObject *kwargs)
{
    if (!called_as_module())
        return PyObject_Call(self->inner, args, kwargs);
    PyObject *session = self->session, *addr = self->addr;
    PyObject *frame = NULL, *output = NULL, *count = NULL, *indices = NULL, *pushed = NULL;
    PyObject *a[N_ATTRS] = {NULL};  /* held for the call: `indices_in` and the forward run Python */
    int have = state_read(session, a, A_TMAP, A_TMAP + 1) && state_read(session, a, A_RECORDS, A_RECORDS + 1) &&
               state_read(session, a, A_STACK, A_STACK + 1) && state_read(session, a, A_CALL_COUNTS, A_FRAMES + 1);
    PyObject *counts = a[A_CALL_COUNTS], *frames = a[A_FRAMES], *records = a[A_RECORDS], *tmap = a[A_TMAP],
             *stack = a[A_STACK];
    if (!have || !PyDict_CheckExact(counts) || !PyList_CheckExact(frames) || !PyList_CheckExact(records)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the capture session is not set up for module scopes");
        goto end;
    }
    count = PyDict_GetItemWithError(counts, addr);
    if (count == NULL && PyErr_Occurred())
        goto end;
    count = count == NULL ? Py_NewRef(zero) : Py_NewRef(count);
    PyObject *next = PyNumber_Add(count, one);
    if (next == NULL || PyDict_SetItem(counts, addr, next) < 0) {
        Py_XDECREF(next);
        goto end;
    }
    Py_DECREF(next);
    PyObject *objs[2] = {args, kwargs != NULL ? kwargs : empty_dict};
    indices = indices_in(session, tmap, objs, 2);
    PyObject *n_records = indices == NULL ? NULL : PyLong_FromSsize_t(PyList_GET_SIZE(records));
    frame = n_records == NULL ? NULL : PyList_New(6);
    if (frame == NULL) {
        Py_XDECREF(n_records);
        goto end;
    }
    PyList_SET_ITEM(frame, 0, Py_NewRef(addr));
    PyList_SET_ITEM(frame, 1, Py_NewRef(count));
    PyList_SET_ITEM(frame, 2, Py_NewRef(indices));
    PyList_SET_ITEM(frame, 3, n_records);
    PyList_SET_ITEM(frame, 4, Py_NewRef(stack));
    PyList_SET_ITEM(frame, 5, Py_NewRef(Py_None));
    pushed = push_stack(stack, addr, count);
    if (pushed == NULL || PyList_Append(frames, frame) < 0)
        goto end;
    state_set(session, A_STACK, pushed);
    output = PyObject_Call(self->inner, args, kwargs);
    {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);  /* the forward's exception, if it raised: raised after the scope closes */
        if (leave_scope(session, frame, output != NULL ? output : Py_None) < 0) {
            if (type != NULL) {
                PyErr_Clear();  /* the forward's own exception is the one to raise */
                PyErr_Restore(type, value, tb);
            }
            Py_CLEAR(output);
        }
        else if (type != NULL) {
            PyErr_Restore(type, value, tb);
        }
    }
end:
    Py_XDECREF(count);
    Py_XDECREF(indices);
    Py_XDECREF(pushed);
    Py_XDECREF(frame);
    state_release(a, 0, N_ATTRS);
    return output;
}

/* A ScopedForward of `type` wrapping `inner` (new reference; the fields are new references to the arguments). */
static PyObject *
new_scoped(PyTypeObject *type, PyObject *session, PyObject *module, PyObject *addr, PyObject *inner)
{
    ScopedForward *self = (ScopedForward *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->session = Py_NewRef(session);
    self->module = Py_NewRef(module);
    self->addr = Py_NewRef(addr);
    self->inner = Py_NewRef(inner);
    return (PyObject *)self;
}

static PyObject *
scoped_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *session, *module, *addr, *inner;
    if (!PyArg_ParseTuple(args, "OOUO:ScopedForward", &session, &module, &addr, &inner))
        return NULL;
    if (stack_type == NULL || call_impl_code == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._hotpath.ScopedForward is not configured");
        return NULL;
    }
    return new_scoped(type, session, module, addr, inner);
}

static int
scoped_traverse(ScopedForward *self, visitproc visit, void *arg)
{
    Py_VISIT(self->session);
    Py_VISIT(self->module);
    Py_VISIT(self->addr);
    Py_VISIT(self->inner);
    return 0;
}

static int
scoped_clear(ScopedForward *self)
{
    Py_CLEAR(self->session);
    Py_CLEAR(self->module);
    Py_CLEAR(self->addr);
    Py_CLEAR(self->inner);
    return 0;
}

static void
scoped_dealloc(ScopedForward *self)
{
    PyObject_GC_UnTrack(self);
    scoped_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
scoped_same(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return Py_NewRef(self);  /* copied and deep-copied as a function is: the object itself */
}

static PyObject *
scoped_name(ScopedForward *self, void *closure)
{
    return PyObject_GetAttr(self->inner, closure == NULL ? str_name : str_qualname);
}

static PyMemberDef scoped_members[] = {
    {"__wrapped__", T_OBJECT_EX, offsetof(ScopedForward, inner), READONLY, "the forward it runs"},
    {"__self__", T_OBJECT_EX, offsetof(ScopedForward, module), READONLY, "the module whose forward it is"},
    {NULL},
};

static PyGetSetDef scoped_getset[] = {
    {"__name__", (getter)scoped_name, NULL, "the forward's name", NULL},
    {"__qualname__", (getter)scoped_name, NULL, "the forward's qualified name", (void *)1},
    {NULL},
};

static PyMethodDef scoped_methods[] = {
    {"__copy__", (PyCFunction)(void (*)(void))scoped_same, METH_FASTCALL, NULL},
    {"__deepcopy__", (PyCFunction)(void (*)(void))scoped_same, METH_FASTCALL, NULL},
    {NULL},
};

static PyTypeObject ScopedForwardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer.capture._hotpath.ScopedForward",
    .tp_doc = "ScopedForward(session, module, address, forward): the module's forward inside its scope",
    .tp_basicsize = sizeof(ScopedForward),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = scoped_new,
    .tp_call = (ternaryfunc)scoped_call,
    .tp_traverse = (traverseproc)scoped_traverse,
    .tp_clear = (inquiry)scoped_clear,
    .tp_dealloc = (destructor)scoped_dealloc,
    .tp_members = scoped_members,
    .tp_getset = scoped_getset,
    .tp_methods = scoped_methods,
};

/* ---- wrap_forwards: ModuleScopes._scope_all's common case, every plain module wrapped in one call ---- */

static PyObject *str_forward = NULL, *str_hook_tables[4] = {NULL};
static const char *hook_table_names[4] = {"_forward_pre_hooks", "_forward_hooks", "_backward_hooks",
                                          "_backward_pre_hooks"};

/* Whether `module` needs its scope from Python: 2 for a TorchScript module, 1 for one with hooks (or
 * every module, while global hooks exist) or a fused fast path, 0 for none of these (-1: error). */
static int
scoped_in_python(PyObject *module, int hook_all, PyObject *fused, PyObject *script_type)
{
    int script = PyObject_IsInstance(module, script_type);
    if (script != 0)
        return script < 0 ? -1 : 2;
    if (hook_all)
        return 1;
    for (int i = 0; i < 4; i++) {
        PyObject *hooks = PyObject_GetAttr(module, str_hook_tables[i]);
        int some = hooks == NULL ? -1 : PyObject_IsTrue(hooks);
        Py_XDECREF(hooks);
        if (some != 0)
            return some;
    }
    return PyDict_Contains(fused, (PyObject *)Py_TYPE(module));
}

/* Make a ScopedForward `module`'s forward (an instance attribute; `(state, previous, wrapper)` appended
 * to `wrapped` as `ModuleScopes._set_forward` appends it). */
static int
wrap_forward(PyObject *session, PyObject *module, PyObject *addr, PyObject *unset, PyObject *wrapped)
{
    PyObject *inner = PyObject_GetAttr(module, str_forward);
    if (inner == NULL)
        return -1;
    PyObject *wrapper = new_scoped(&ScopedForwardType, session, module, addr, inner);
    Py_DECREF(inner);
    if (wrapper == NULL)
        return -1;
    PyObject *state = PyObject_GenericGetDict(module, NULL);
    int rc = -1;
    if (state != NULL && PyDict_Check(state)) {
        PyObject *previous = PyDict_GetItemWithError(state, str_forward);
        if (previous != NULL || !PyErr_Occurred()) {
            PyObject *entry = PyTuple_Pack(3, state, previous != NULL ? previous : unset, wrapper);
            rc = entry == NULL || PyList_Append(wrapped, entry) < 0 ? -1 : PyDict_SetItem(state, str_forward, wrapper);
            Py_XDECREF(entry);
        }
    }
    else if (state != NULL) {
        PyErr_SetString(PyExc_TypeError, "wrap_forwards: a module's __dict__ must be a dict");
    }
    Py_XDECREF(state);
    Py_DECREF(wrapper);
    return rc;
}

/* wrap_forwards(session, walk, hook_all, fused, ScriptModule, unset, wrapped) -> list
 *
 * For each (address, module) of a pre-order walk outside TorchScript modules: a ScopedForward as its
 * forward, or, where its scope needs Python (scoped_in_python), the pair in the list returned (in walk
 * order) for `ModuleScopes._enter_scopes_of`. */
static PyObject *
wrap_forwards(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 7 || !PyList_CheckExact(argv[1]) || !PyDict_Check(argv[3]) || !PyList_CheckExact(argv[6])) {
        PyErr_SetString(PyExc_TypeError, "wrap_forwards(session, walk: list, hook_all, fused: dict, ScriptModule, unset, "
                                         "wrapped: list)");
        return NULL;
    }
    if (stack_type == NULL || call_impl_code == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._hotpath.wrap_forwards is not configured");
        return NULL;
    }
    PyObject *session = argv[0], *walk = argv[1], *fused = argv[3], *script_type = argv[4], *unset = argv[5],
             *wrapped = argv[6];
    int hook_all = PyObject_IsTrue(argv[2]);
    if (hook_all < 0)
        return NULL;
    PyObject *rest = PyList_New(0), *inside = NULL;  /* inside: `address.` of the last script module ("" at the root) */
    for (Py_ssize_t i = 0; rest != NULL && i < PyList_GET_SIZE(walk); i++) {
        PyObject *entry = PyList_GET_ITEM(walk, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))) {
            PyErr_SetString(PyExc_TypeError, "wrap_forwards: a walk holds (address, module) pairs");
            Py_CLEAR(rest);
            break;
        }
        PyObject *addr = PyTuple_GET_ITEM(entry, 0), *module = PyTuple_GET_ITEM(entry, 1);
        if (inside != NULL) {  /* (address + ".").startswith(inside): run within the script module */
            PyObject *probe = PyUnicode_FromFormat("%U.", addr);
            Py_ssize_t within = probe == NULL ? -1 : PyUnicode_Tailmatch(probe, inside, 0, PY_SSIZE_T_MAX, -1);
            Py_XDECREF(probe);
            if (within != 0) {
                if (within < 0)
                    Py_CLEAR(rest);
                continue;
            }
        }
        int python = scoped_in_python(module, hook_all, fused, script_type);
        if (python < 0 || (python ? PyList_Append(rest, entry) : wrap_forward(session, module, addr, unset, wrapped)) < 0) {
            Py_CLEAR(rest);
            break;
        }
        if (python == 2) {  /* the modules inside it run within it */
            Py_XSETREF(inside, PyUnicode_GET_LENGTH(addr) ? PyUnicode_FromFormat("%U.", addr) : PyUnicode_New(0, 0));
            if (inside == NULL)
                Py_CLEAR(rest);
        }
    }
    Py_XDECREF(inside);
    return rest;
}

/* unwrap_forwards(wrapped, unset): `ModuleScopes._unwrap`'s loop. Each (state, previous, wrapper) of
 * `wrapped` whose module's forward is still the wrapper gets `previous` back (none where it is `unset`). */
static PyObject *
unwrap_forwards(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 2 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "unwrap_forwards(wrapped: list, unset)");
        return NULL;
    }
    PyObject *wrapped = argv[0], *unset = argv[1];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(wrapped); i++) {
        PyObject *entry = PyList_GET_ITEM(wrapped, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || !PyDict_Check(PyTuple_GET_ITEM(entry, 0))) {
            PyErr_SetString(PyExc_TypeError, "unwrap_forwards: wrapped holds (state, previous, wrapper) triples");
            return NULL;
        }
        PyObject *state = PyTuple_GET_ITEM(entry, 0), *previous = PyTuple_GET_ITEM(entry, 1);
        PyObject *now = PyDict_GetItemWithError(state, str_forward);
        if (now == NULL && PyErr_Occurred())
            return NULL;
        if (now != PyTuple_GET_ITEM(entry, 2))  /* replaced during the forward: theirs stays */
            continue;
        if ((previous == unset ? PyDict_DelItem(state, str_forward) : PyDict_SetItem(state, str_forward, previous)) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(torch.Tensor, TENSOR placeholder, position names, RECORD_FIELDS)"},
    {"configure_state", configure_state, METH_VARARGS,
     "configure_state(CaptureState, its slot descriptors, GuardFastPath, its slot descriptors)"},
    {"scan_args", (PyCFunction)(void (*)(void))scan_args, METH_FASTCALL, "The argument scan of one call."},
    {"record_outputs", (PyCFunction)(void (*)(void))record_outputs, METH_FASTCALL, "The output records of one call."},
    {"tensor_indices", (PyCFunction)(void (*)(void))tensor_indices, METH_FASTCALL,
     "Op indices of the tensors in nested lists, tuples and dicts."},
    {"scan_constants", (PyCFunction)(void (*)(void))scan_constants, METH_FASTCALL,
     "A weights-free call's tensors not on meta, tensor count, known first value, Python-only flag."},
    {"site", (PyCFunction)(void (*)(void))site, METH_FASTCALL, "The user's source site of the current call."},
    {"frame_objects", set_frame_objects, METH_O, "frame_objects(flag): walk frame objects in site() (tests)"},
    {"configure_call", configure_call, METH_VARARGS, "configure_call(INFO_CACHE, peek_interpreter_stack, scrub_deep, shallow_tensors)"},
    {"torch_function", (PyCFunction)(void (*)(void))torch_function, METH_FASTCALL,
     "A capture session's function mode hook (bound to the session)."},
    {"wrap_forwards", (PyCFunction)(void (*)(void))wrap_forwards, METH_FASTCALL,
     "wrap_forwards(session, walk, hook_all, fused, ScriptModule, unset, wrapped): plain modules' forwards wrapped."},
    {"unwrap_forwards", (PyCFunction)(void (*)(void))unwrap_forwards, METH_FASTCALL,
     "unwrap_forwards(wrapped, unset): each wrapped forward put back as it was."},
    {"configure_scopes", configure_scopes, METH_VARARGS,
     "configure_scopes(Module._call_impl's code, its inner closure's code, ModuleStack, its slot descriptors)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", "The capture's per-call loops in C.", -1,
                                    methods};

#ifndef TLX_SOURCE_DIGEST  /* the digest of this file's sources, passed by setup.py (kernel/native.py compares it) */
#define TLX_SOURCE_DIGEST ""
#endif

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    str_class = PyUnicode_InternFromString("__class__");
    object_class = str_class == NULL ? NULL : PyDict_GetItemWithError(PyBaseObject_Type.tp_dict, str_class);
    if (object_class == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ImportError, "object has no __class__ descriptor");
        return NULL;
    }
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_device = PyUnicode_InternFromString("device");
    str_requires_grad = PyUnicode_InternFromString("requires_grad");
    str_startswith = PyUnicode_InternFromString("startswith");
    str_is_meta = PyUnicode_InternFromString("is_meta");
    str_type = PyUnicode_InternFromString("type");
    str_meta = PyUnicode_InternFromString("meta");
    str_version = PyUnicode_InternFromString("_version");
    str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (str_version == NULL || str_untyped_storage == NULL || str_data_ptr == NULL)
        return NULL;
    str_slow = PyUnicode_InternFromString("_torch_function_py");
    str_other = PyUnicode_InternFromString("_other_output");
    str_inplace = PyUnicode_InternFromString("inplace");
    str_out = PyUnicode_InternFromString("out");
    str_constant_call = PyUnicode_InternFromString("_constant_call");
    str_mixed = PyUnicode_InternFromString("_mixed");
    str_after_call = PyUnicode_InternFromString("after_call");
    str_failed = PyUnicode_InternFromString("_failed");
    str_device_kw = PyUnicode_InternFromString("device");
    str_self = PyUnicode_InternFromString("__self__");
    str_module_name = PyUnicode_InternFromString("__name__");
    str_tracer_prefix = PyUnicode_InternFromString("tracer.");
    empty_dict = PyDict_New();
    empty_tuple = PyTuple_New(0);
    empty_str = PyUnicode_InternFromString("");
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    if (!str_slow || !str_other || !str_inplace || !str_out || !str_constant_call ||
        !str_mixed || !str_after_call || !str_failed || !str_device_kw || !str_self ||
        !str_module_name || !str_tracer_prefix || !empty_dict ||
        !empty_tuple || !empty_str || !zero || !one)
        return NULL;
    str_forward = PyUnicode_InternFromString("forward");
    for (int i = 0; i < 4; i++) {
        str_hook_tables[i] = PyUnicode_InternFromString(hook_table_names[i]);
        if (str_hook_tables[i] == NULL)
            return NULL;
    }
    if (str_forward == NULL)
        return NULL;
    str_indices_in = PyUnicode_InternFromString("_indices_in");
    str_depth = PyUnicode_InternFromString("depth");
    str_name = PyUnicode_InternFromString("__name__");
    str_qualname = PyUnicode_InternFromString("__qualname__");
    if (!str_indices_in || !str_depth || !str_name ||
        !str_qualname || PyType_Ready(&ScopedForwardType) < 0)
        return NULL;
    if (!str_shape || !str_dtype || !str_device || !str_requires_grad || !str_startswith || !str_is_meta || !str_type ||
        !str_meta)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", TLX_SOURCE_DIGEST) < 0)
        Py_CLEAR(m);
    if (m != NULL && PyModule_AddObjectRef(m, "ScopedForward", (PyObject *)&ScopedForwardType) < 0)
        Py_CLEAR(m);
    return m;
}
