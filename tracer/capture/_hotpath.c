/* The capture's per-call loops in C (issue 18): the argument scan, the output records and the source
 * site of `CaptureSession.__torch_function__`, the tensors a module call takes and returns, and the
 * weights-free guard's scan of a call's arguments. Optional: `tracer.capture.hotpath` falls back to the
 * session's own Python when this module is not built, and every function here returns None for a
 * case it does not handle (the Python then does the whole step), so the two paths record the same.
 *
 * No function here keeps a reference it was given beyond the containers the caller passed in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

static PyObject *tensor_type = NULL;   /* torch.Tensor */
static PyObject *placeholder = NULL;   /* call_template.TENSOR */
static PyObject *positions = NULL;     /* ("0", "1", ...): the position names of top-level arguments */
static PyObject *object_class = NULL;  /* object.__dict__["__class__"] (borrowed from object's type dict) */
static PyObject *str_class, *str_shape, *str_dtype, *str_device, *str_requires_grad, *str_startswith, *str_is_meta, *str_type,
    *str_meta;

/* Field positions of a raw record this module fills (checked against session.R_* by hotpath.py). */
#define R_TENSOR 2
#define R_META 3
#define R_OUT_IDX 5

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *t, *p, *pos;
    if (!PyArg_ParseTuple(args, "OOO!:configure", &t, &p, &PyTuple_Type, &pos))
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

/* record_outputs(outs, record, records, metas, tmap, param_ids, save, save_value) -> None
 *
 * For each output tensor: a copy of `record` (a raw record's fields, a tuple) with its tensor, its
 * shared metadata tuple and its output index filled in, appended to `records`; its tmap entry (the
 * tensor itself when values are saved, else a weak reference); `save_value(index, tensor)` when
 * saved. The caller handles in-place calls (a written base, a buffer's value before the write). */
static PyObject *
record_outputs(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "record_outputs(outs, record, records, metas, tmap, param_ids, save, save_value)");
        return NULL;
    }
    PyObject *outs = argv[0], *record = argv[1], *records = argv[2], *metas = argv[3], *tmap = argv[4],
             *param_ids = argv[5], *save_value = argv[7];
    int save = PyObject_IsTrue(argv[6]);
    if (save < 0)
        return NULL;
    if (!PyTuple_CheckExact(outs) || !PyTuple_CheckExact(record) || !PyList_CheckExact(records) ||
        !PyDict_CheckExact(metas) || !PyDict_CheckExact(tmap) || !PyDict_CheckExact(param_ids)) {
        PyErr_SetString(PyExc_TypeError, "record_outputs: unexpected container types");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(record);
    if (width <= R_OUT_IDX) {
        PyErr_SetString(PyExc_ValueError, "record_outputs: record too short");
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
        if (save) {
            PyObject *done = PyObject_CallFunctionObjArgs(save_value, idx_obj, t, NULL);
            if (done == NULL) {
                Py_DECREF(idx_obj);
                return NULL;
            }
            Py_DECREF(done);
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
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 1; i < argc; i++) {
        int rc = collect_indices(argv[i], argv[0], out, 0);
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

/* Whether tensor `b` is on the meta device: `b.is_meta` for a plain tensor or parameter (`plain`: a tuple of
 * exact types), `b.device.type == "meta"` for a subclass. -1 on error. */
static int
on_meta(PyObject *b, PyObject *plain)
{
    int exact = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plain); i++)
        exact |= (PyObject *)Py_TYPE(b) == PyTuple_GET_ITEM(plain, i);
    if (exact) {
        PyObject *flag = PyObject_GetAttr(b, str_is_meta);
        if (flag == NULL)
            return -1;
        int r = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        return r;
    }
    PyObject *device = PyObject_GetAttr(b, str_device);
    PyObject *kind = device == NULL ? NULL : PyObject_GetAttr(device, str_type);
    Py_XDECREF(device);
    if (kind == NULL)
        return -1;
    int r = PyObject_RichCompareBool(kind, str_meta, Py_EQ);
    Py_DECREF(kind);
    return r;
}

/* One argument of `scan_constants`; returns -1 on error. */
static int
scan_constant_arg(PyObject *a, PyObject *plain, PyObject *is_plain, PyObject *reals, Py_ssize_t *n, PyObject **first,
                  int *python_only)
{
    int tensor = is_tensor(a);
    if (tensor < 0)
        return -1;
    int seq = !tensor && (PyList_CheckExact(a) || PyTuple_CheckExact(a));
    if (tensor || seq) {
        PyObject *items = tensor ? PyTuple_Pack(1, a) : Py_NewRef(a);
        if (items == NULL)
            return -1;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(items); j++) {
            PyObject *b = Py_NewRef(PySequence_Fast_GET_ITEM(items, j));
            int bt = is_tensor(b);
            int meta = bt > 0 ? on_meta(b, plain) : 0;
            int rc = bt < 0 || meta < 0 ? -1 : 0;
            if (rc == 0 && bt > 0) {
                *n += 1;
                *python_only = 0;
                if (!meta)
                    rc = PyList_Append(reals, b);
                else if (*first == NULL)
                    *first = Py_NewRef(b);
            }
            Py_DECREF(b);
            if (rc < 0) {
                Py_DECREF(items);
                return -1;
            }
        }
        Py_DECREF(items);
    }
    if (*python_only) {
        PyObject *r = PyObject_CallOneArg(is_plain, a);
        if (r == NULL)
            return -1;
        int ok = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (ok < 0)
            return -1;
        if (!ok)
            *python_only = 0;
    }
    return 0;
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
    PyObject *args = argv[0], *kwargs = argv[1], *known = argv[2], *plain = argv[3], *is_plain = argv[4];
    PyObject *reals = PyList_New(0);
    if (reals == NULL)
        return NULL;
    PyObject *first = NULL;
    Py_ssize_t n = 0;
    int python_only = 1;
    PyObject *values = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++)
        if (scan_constant_arg(PyTuple_GET_ITEM(args, i), plain, is_plain, reals, &n, &first, &python_only) < 0)
            goto error;
    if (PyDict_GET_SIZE(kwargs)) {
        values = PyDict_Values(kwargs);
        if (values == NULL)
            goto error;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++)
            if (scan_constant_arg(PyList_GET_ITEM(values, i), plain, is_plain, reals, &n, &first, &python_only) < 0)
                goto error;
    }
    int first_known = 0;
    if (first != NULL) {
        PyObject *tid = PyLong_FromVoidPtr(first);
        if (tid == NULL)
            goto error;
        PyObject *hit = PyDict_GetItemWithError(known, tid);  /* borrowed */
        Py_DECREF(tid);
        if (hit == NULL && PyErr_Occurred())
            goto error;
        if (hit != NULL) {
            Py_INCREF(hit);
            PyObject *ref = PySequence_GetItem(hit, 0);
            PyObject *obj = ref == NULL ? NULL : PyObject_CallNoArgs(ref);
            Py_XDECREF(ref);
            Py_DECREF(hit);
            if (obj == NULL)
                goto error;
            first_known = obj == first;
            Py_DECREF(obj);
        }
    }
    Py_XDECREF(values);
    Py_XDECREF(first);
    PyObject *result = Py_BuildValue("(NnOO)", reals, n, first_known ? Py_True : Py_False,
                                     python_only ? Py_True : Py_False);
    return result;
error:
    Py_XDECREF(values);
    Py_XDECREF(first);
    Py_DECREF(reals);
    return NULL;
}

/* site(internal, codes, sites, prefixes) -> (code, offset) | None
 *
 * The shared (code, instruction offset) of the innermost frame outside torch and tracer, starting at
 * the caller of the Python function that called this one (as `CaptureSession._site`). `internal`
 * caches id(code) -> whether the code is torch's or tracer's own; `codes` keeps those code objects
 * alive; `sites` maps (id(code), offset) -> the shared tuple. */
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
    PyFrameObject *here = PyEval_GetFrame();  /* borrowed: the Python function that called us */
    if (here == NULL)
        Py_RETURN_NONE;
    PyFrameObject *f = PyFrame_GetBack(here);  /* new references from here on */
    while (f != NULL) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *key = PyLong_FromVoidPtr(code);
        if (key == NULL)
            goto error_code;
        PyObject *known = PyDict_GetItemWithError(cache, key);
        int internal;
        if (known != NULL) {
            internal = known == Py_True;
        }
        else {
            if (PyErr_Occurred())
                goto error_key;
            PyObject *hit = PyObject_CallMethodOneArg(code->co_filename, str_startswith, prefixes);
            if (hit == NULL)
                goto error_key;
            internal = hit == Py_True;
            Py_DECREF(hit);
            if (PyDict_SetItem(cache, key, internal ? Py_True : Py_False) < 0 ||
                PyList_Append(codes, (PyObject *)code) < 0)
                goto error_key;
        }
        if (!internal) {
            int lasti = PyFrame_GetLasti(f);
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
            Py_DECREF(key);
            Py_DECREF(code);
            Py_DECREF(f);
            return found;
        }
        Py_DECREF(key);
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
        continue;
    error_key:
        Py_DECREF(key);
    error_code:
        Py_DECREF(code);
        Py_DECREF(f);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(torch.Tensor, TENSOR placeholder, position names)"},
    {"scan_args", (PyCFunction)(void (*)(void))scan_args, METH_FASTCALL, "The argument scan of one call."},
    {"record_outputs", (PyCFunction)(void (*)(void))record_outputs, METH_FASTCALL, "The output records of one call."},
    {"tensor_indices", (PyCFunction)(void (*)(void))tensor_indices, METH_FASTCALL,
     "Op indices of the tensors in nested lists, tuples and dicts."},
    {"scan_constants", (PyCFunction)(void (*)(void))scan_constants, METH_FASTCALL,
     "A weights-free call's tensors not on meta, tensor count, known first value, Python-only flag."},
    {"site", (PyCFunction)(void (*)(void))site, METH_FASTCALL, "The user's source site of the current call."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", "The capture's per-call loops in C.", -1,
                                    methods};

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
    if (!str_shape || !str_dtype || !str_device || !str_requires_grad || !str_startswith || !str_is_meta || !str_type ||
        !str_meta)
        return NULL;
    return PyModule_Create(&module);
}
