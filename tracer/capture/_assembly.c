/* A finished capture's records turned into the trace's objects in C (issue 18): the op labels, the
 * call templates and the Ops (`tracer.capture.build`). Optional, like `_hotpath.c`: `build.py` runs the
 * same passes in Python when this module is not built, and the two build the same objects.
 *
 * Each function reads the session's raw records (lists in the field order of the contract's RECORD_FIELDS,
 * `kernel/contract.py`, read by `configure_records`) and keeps no reference beyond the objects it returns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* Raw record fields: R_* in _slots.h, positions read from the contract (configure_records). */
#define FUNC_INFO_FUNC 5  /* functions.FuncInfo.func */

/* The record at `i` of `records` (borrowed), checked to be a list holding every field up to `last`. */
static PyObject *
record_at(PyObject *records, Py_ssize_t i, Py_ssize_t last)
{
    PyObject *rec = PyList_GET_ITEM(records, i);
    if (record_len == 0) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._assembly: configure_records was not called");
        return NULL;
    }
    if (!PyList_CheckExact(rec) || PyList_GET_SIZE(rec) != record_len || PyList_GET_SIZE(rec) <= last) {
        PyErr_SetString(PyExc_TypeError, "a record must be a list of the session's fields");
        return NULL;
    }
    return rec;
}

/* `labels[index]` (borrowed), the op index checked to be in range. */
static PyObject *
label_at(PyObject *labels, PyObject *index)
{
    Py_ssize_t at = PyLong_AsSsize_t(index);
    if (at < 0 || at >= PyList_GET_SIZE(labels)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_IndexError, "an op index out of range");
        return NULL;
    }
    return PyList_GET_ITEM(labels, at);
}

/* ---- op_labels: `<kind>_<n>` per record (capture.build._labels) ----------------------------------- */

/* `<kind>_<k>` (new reference; PyUnicode_FromFormat parses its format on every call and costs several times this). */
static PyObject *
numbered(PyObject *kind, Py_ssize_t k)
{
    char digits[24];
    int nd = 0;
    for (size_t v = (size_t)k; nd == 0 || v > 0; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    Py_ssize_t len = PyUnicode_GET_LENGTH(kind);
    PyObject *label = PyUnicode_New(len + 1 + nd, PyUnicode_MAX_CHAR_VALUE(kind));
    if (label == NULL || PyUnicode_CopyCharacters(label, 0, kind, 0, len) < 0) {
        Py_XDECREF(label);
        return NULL;
    }
    int type = PyUnicode_KIND(label);
    void *data = PyUnicode_DATA(label);
    PyUnicode_WRITE(type, data, len, '_');
    for (int i = 0; i < nd; i++)
        PyUnicode_WRITE(type, data, len + 1 + i, digits[nd - 1 - i]);
    return label;
}

/* op_labels(records) -> list of str, n counting each kind from 1 in record order */
static PyObject *
op_labels(PyObject *self, PyObject *records)
{
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "op_labels(records): records must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *labels = PyList_New(n), *counts = PyDict_New();
    if (labels == NULL || counts == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = record_at(records, i, R_INFO);
        if (rec == NULL)
            goto error;
        PyObject *info = PyList_GET_ITEM(rec, R_INFO);
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(info, 0))) {
            PyErr_SetString(PyExc_TypeError, "op_labels: a record's FuncInfo must be a tuple starting with its kind");
            goto error;
        }
        PyObject *kind = PyTuple_GET_ITEM(info, 0);
        PyObject *seen = PyDict_GetItemWithError(counts, kind);
        if (seen == NULL && PyErr_Occurred())
            goto error;
        Py_ssize_t k = seen == NULL ? 1 : PyLong_AsSsize_t(seen) + 1;
        if (k == 0 && PyErr_Occurred())
            goto error;
        PyObject *count = PyLong_FromSsize_t(k);
        if (count == NULL || PyDict_SetItem(counts, kind, count) < 0) {
            Py_XDECREF(count);
            goto error;
        }
        Py_DECREF(count);
        PyObject *label = numbered(kind, k);
        if (label == NULL)
            goto error;
        PyList_SET_ITEM(labels, i, label);
    }
    Py_DECREF(counts);
    return labels;
error:
    Py_XDECREF(labels);  /* unset items are NULL, which list deallocation skips */
    Py_XDECREF(counts);
    return NULL;
}

/* ---- call_templates: one CallTemplate per call (capture.call_template.call_templates) -------------- */

static PyTypeObject *template_type = NULL;
static Py_ssize_t template_offsets[6];  /* _func, _args, _kwargs, _parents, _params, _encoded */

static PyObject *edge_placeholder = NULL;  /* call_template.TENSOR */
static PyTypeObject *tensor_class = NULL;  /* torch.Tensor */

/* configure_templates(CallTemplate, its slot descriptors[, TENSOR, torch.Tensor]): the last two turn on the
 * saved-call fast path (`detached_call`) */
static PyObject *
configure_templates(PyObject *self, PyObject *args)
{
    PyObject *type, *descr, *placeholder = NULL, *tensor = NULL;
    if (!PyArg_ParseTuple(args, "O!O!|OO!:configure_templates", &PyType_Type, &type, &PyTuple_Type, &descr,
                          &placeholder, &PyType_Type, &tensor))
        return NULL;
    if (PyTuple_GET_SIZE(descr) != 6 || slot_offsets(descr, template_offsets, 6) < 0) {
        PyErr_SetString(PyExc_TypeError, "configure_templates: CallTemplate must have the slots _func, _args, _kwargs, "
                                         "_parents, _params, _encoded");
        return NULL;
    }
    Py_XSETREF(template_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(edge_placeholder, placeholder == NULL || tensor == NULL ? NULL : Py_NewRef(placeholder));
    Py_XSETREF(tensor_class, placeholder == NULL || tensor == NULL ? NULL : (PyTypeObject *)Py_NewRef(tensor));
    Py_RETURN_NONE;
}

/* Whether top-level argument `i` is one of a call's parents (`parents`: its (op index, position) pairs,
 * the position of argument i being str(i)): 1, 0 (or -1 on error). */
static int
on_edge(PyObject *parents, Py_ssize_t i)
{
    if (!PyTuple_Check(parents))
        return 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parents); k++) {
        PyObject *pair = PyTuple_GET_ITEM(parents, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1)))
            continue;
        PyObject *pos = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t n = PyUnicode_GET_LENGTH(pos), value = 0;
        if (n == 0 || n > 9)
            continue;
        int digits = 1;
        for (Py_ssize_t c = 0; c < n && digits; c++) {
            Py_UCS4 ch = PyUnicode_READ_CHAR(pos, c);
            digits = ch >= '0' && ch <= '9' && !(c == 0 && ch == '0' && n > 1);
            value = value * 10 + (Py_ssize_t)(ch - '0');
        }
        if (digits && value == i)
            return 1;
    }
    return 0;
}

/* `call_template._detach_call(live, snapshots, parents)` for its common case (new reference): a call without
 * keyword arguments whose every argument is a plain value (int, float, str, bool, None) or a tensor on one of
 * its edges, that wrote no parameter. NULL without an error for every other call (the Python does it). */
static PyObject *
detached_call(PyObject *live, PyObject *snapshots, PyObject *parents)
{
    if (edge_placeholder == NULL || !PyTuple_CheckExact(live) || PyTuple_GET_SIZE(live) != 3 ||
        !PyDict_CheckExact(snapshots) || PyDict_GET_SIZE(snapshots) != 0)
        return NULL;
    PyObject *func = PyTuple_GET_ITEM(live, 0), *args = PyTuple_GET_ITEM(live, 1), *kwargs = PyTuple_GET_ITEM(live, 2);
    if (!PyTuple_Check(args) || !PyDict_CheckExact(kwargs) || PyDict_GET_SIZE(kwargs) != 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i), *item = NULL;
        if (a == Py_None || PyLong_CheckExact(a) || PyFloat_CheckExact(a) || PyUnicode_CheckExact(a) || PyBool_Check(a))
            item = a;
        else if (PyType_IsSubtype(Py_TYPE(a), tensor_class) && on_edge(parents, i))
            item = edge_placeholder;
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, Py_NewRef(item));
    }
    PyObject *parts = PyTuple_Pack(3, func, out, Py_None);  /* no keyword arguments: None, as a scrubbed call has */
    Py_DECREF(out);
    return parts;
}

/* The template of a record that starts a call (new reference): its live call without its tensors
 * (`detach(live, snapshots, parents)`, values saved) or its recorded callable and scrubbed arguments. */
static PyObject *
new_template(PyObject *rec, PyObject *snapshots, PyObject *detach)
{
    PyObject *values[6] = {NULL}, *live = PyList_GET_ITEM(rec, R_CALLSPEC);
    if (live != Py_None) {
        PyObject *parts = detached_call(live, snapshots, PyList_GET_ITEM(rec, R_PARENTS));
        if (parts == NULL && !PyErr_Occurred())
            parts = PyObject_CallFunctionObjArgs(detach, live, snapshots, PyList_GET_ITEM(rec, R_PARENTS), NULL);
        if (parts == NULL)
            return NULL;
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) != 3) {
            Py_DECREF(parts);
            PyErr_SetString(PyExc_TypeError, "call_templates: detach must return (func, args, kwargs)");
            return NULL;
        }
        for (int i = 0; i < 3; i++)
            values[i] = Py_NewRef(PyTuple_GET_ITEM(parts, i));
        Py_DECREF(parts);
    }
    else {
        PyObject *info = PyList_GET_ITEM(rec, R_INFO), *kwargs = PyList_GET_ITEM(rec, R_KWARGS);
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) <= FUNC_INFO_FUNC) {
            PyErr_SetString(PyExc_TypeError, "call_templates: a record's FuncInfo must be a tuple");
            return NULL;
        }
        int some = PyObject_IsTrue(kwargs);
        if (some < 0)
            return NULL;
        values[0] = Py_NewRef(PyTuple_GET_ITEM(info, FUNC_INFO_FUNC));
        values[1] = Py_NewRef(PyList_GET_ITEM(rec, R_ARGS));
        values[2] = Py_NewRef(some ? kwargs : Py_None);  /* None: no keyword arguments (no empty dict per call) */
    }
    values[3] = Py_NewRef(PyList_GET_ITEM(rec, R_PARENTS));
    values[4] = Py_NewRef(PyList_GET_ITEM(rec, R_PARAMS));
    values[5] = Py_NewRef(Py_None);
    return new_slotted(template_type, template_offsets, values, 6);
}

/* call_templates(records, snapshots, detach) -> list
 *
 * `call_templates`' loop: {} for a synthetic record (no call), one CallTemplate per call shared by the
 * records of its outputs. */
static PyObject *
call_templates(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 3 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "call_templates(records: list, snapshots, detach)");
        return NULL;
    }
    if (template_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._assembly.call_templates is not configured");
        return NULL;
    }
    PyObject *records = argv[0], *snapshots = argv[1], *detach = argv[2];
    Py_ssize_t n = PyList_GET_SIZE(records), last_call = -1;
    PyObject *out = PyList_New(n), *last = NULL;  /* last: borrowed from `out` */
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = record_at(records, i, R_KWARGS), *item;
        if (rec == NULL)
            goto error;
        if (PyList_GET_ITEM(rec, R_CALLSPEC) == Py_None && PyList_GET_ITEM(rec, R_ARGS) == Py_None) {
            item = PyDict_New();
        }
        else {
            Py_ssize_t call = PyLong_AsSsize_t(PyList_GET_ITEM(rec, R_CALL));
            if (call == -1 && PyErr_Occurred())
                goto error;
            if (last != NULL && call == last_call) {  /* the next output of the same multi-output call */
                item = Py_NewRef(last);
            }
            else {
                item = last = new_template(rec, snapshots, detach);
                last_call = call;
            }
        }
        if (item == NULL)
            goto error;
        PyList_SET_ITEM(out, i, item);
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* ---- build_ops: the records as Ops (capture.build._build_ops) ------------------------------------ */

#define MAX_SLOTS 32
static PyTypeObject *op_type = NULL, *edge_type = NULL;
static Py_ssize_t op_offsets[MAX_SLOTS], edge_offsets[2];
static Py_ssize_t op_width = 0;  /* Op's slots; the first OP_FILLED are filled by position, the rest None */
#define OP_FILLED 18
static PyObject *str_entry = NULL, *root_entry = NULL;

/* configure_build(Op, Op's slot descriptors, Edge, Edge's slot descriptors, root entry) */
static PyObject *
configure_build(PyObject *self, PyObject *args)
{
    PyObject *op, *op_d, *edge, *edge_d, *root;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:configure_build", &PyType_Type, &op, &PyTuple_Type, &op_d, &PyType_Type,
                          &edge, &PyTuple_Type, &edge_d, &PyTuple_Type, &root))
        return NULL;
    if (PyTuple_GET_SIZE(op_d) < OP_FILLED || PyTuple_GET_SIZE(edge_d) != 2 || slot_offsets(op_d, op_offsets, MAX_SLOTS) < 0 ||
        slot_offsets(edge_d, edge_offsets, 2) < 0) {
        PyErr_SetString(PyExc_TypeError, "configure_build: Op and Edge must be slotted classes of object fields");
        return NULL;
    }
    op_width = PyTuple_GET_SIZE(op_d);
    Py_XSETREF(op_type, (PyTypeObject *)Py_NewRef(op));
    Py_XSETREF(edge_type, (PyTypeObject *)Py_NewRef(edge));
    Py_XSETREF(root_entry, Py_NewRef(root));
    Py_RETURN_NONE;
}

/* The value `cache[id(raw)]`, or `make(raw, cache)` on a miss (new reference). */
static PyObject *
cached(PyObject *cache, PyObject *raw, PyObject *make)
{
    PyObject *key = PyLong_FromVoidPtr(raw);
    if (key == NULL)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(cache, key);
    Py_DECREF(key);
    if (hit != NULL)
        return Py_NewRef(hit);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallFunctionObjArgs(make, raw, cache, NULL);
}

/* `items` when it has fewer than two entries, else `unique(items)` (new reference). */
static PyObject *
unique_of(PyObject *items, PyObject *unique)
{
    if (PyTuple_Check(items) && PyTuple_GET_SIZE(items) < 2)
        return Py_NewRef(items);
    return PyObject_CallOneArg(unique, items);
}

/* The edges of one record's (op index, position) parents. */
static PyObject *
edges_of(PyObject *parents, PyObject *labels)
{
    if (!PyTuple_Check(parents)) {
        PyErr_SetString(PyExc_TypeError, "build_ops: parents must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(parents);
    PyObject *edges = PyTuple_New(n);
    if (edges == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(parents, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "build_ops: a parent must be an (index, position) pair");
            Py_DECREF(edges);
            return NULL;
        }
        PyObject *source = label_at(labels, PyTuple_GET_ITEM(pair, 0));
        if (source == NULL) {
            Py_DECREF(edges);
            return NULL;
        }
        PyObject *values[2] = {Py_NewRef(source), Py_NewRef(PyTuple_GET_ITEM(pair, 1))};
        PyObject *edge = new_slotted(edge_type, edge_offsets, values, 2);
        if (edge == NULL) {
            Py_DECREF(edges);
            return NULL;
        }
        PyTuple_SET_ITEM(edges, i, edge);
    }
    return edges;
}

/* build_ops(records, labels, templates, metas, sites, make_meta, make_site, unique) -> list of Op
 *
 * `_build_ops`' loop: one Op per raw record, the metadata and source site of each shared through the
 * caches keyed by the raw tuple's id (a miss calls make_meta / make_site), parameters and writes of
 * two or more deduplicated by `unique`. */
static PyObject *
build_ops(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 8) {
        PyErr_SetString(PyExc_TypeError, "build_ops(records, labels, templates, metas, sites, make_meta, make_site, unique)");
        return NULL;
    }
    PyObject *records = argv[0], *labels = argv[1], *templates = argv[2], *metas = argv[3], *sites = argv[4],
             *make_meta = argv[5], *make_site = argv[6], *unique = argv[7];
    if (op_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._assembly.build_ops is not configured");
        return NULL;
    }
    if (!PyList_CheckExact(records) || !PyList_CheckExact(labels) || !PyList_CheckExact(templates) ||
        !PyDict_CheckExact(metas) || !PyDict_CheckExact(sites) || PyList_GET_SIZE(labels) != PyList_GET_SIZE(records) ||
        PyList_GET_SIZE(templates) != PyList_GET_SIZE(records)) {
        PyErr_SetString(PyExc_TypeError, "build_ops: unexpected container types or lengths");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *ops = PyList_New(n);
    if (ops == NULL)
        return NULL;
    for (Py_ssize_t idx = 0; idx < n; idx++) {
        PyObject *rec = PyList_GET_ITEM(records, idx);
        if (record_len == 0 || !PyList_CheckExact(rec) || PyList_GET_SIZE(rec) != record_len) {
            PyErr_SetString(PyExc_TypeError, "build_ops: a record must be a list of the session's fields");
            goto error;
        }
        PyObject *info = PyList_GET_ITEM(rec, R_INFO);
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 2) {
            PyErr_SetString(PyExc_TypeError, "build_ops: a record's FuncInfo must be a tuple");
            goto error;
        }
        PyObject *stack = PyList_GET_ITEM(rec, R_STACK);
        PyObject *entry = PyObject_GetAttr(stack, str_entry);
        if (entry == NULL)
            goto error;
        if (entry == Py_None)
            Py_SETREF(entry, Py_NewRef(root_entry));
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            Py_DECREF(entry);
            PyErr_SetString(PyExc_TypeError, "build_ops: a module stack entry must be an (address, call) pair");
            goto error;
        }
        PyObject *values[MAX_SLOTS] = {NULL};
        values[0] = PyLong_FromSsize_t(idx);
        values[1] = Py_NewRef(PyList_GET_ITEM(labels, idx));
        values[2] = Py_NewRef(PyTuple_GET_ITEM(info, 0));
        values[3] = Py_NewRef(PyTuple_GET_ITEM(info, 1));
        values[4] = edges_of(PyList_GET_ITEM(rec, R_PARENTS), labels);
        values[5] = cached(metas, PyList_GET_ITEM(rec, R_META), make_meta);
        values[6] = Py_NewRef(PyList_GET_ITEM(rec, R_CALL));
        values[7] = Py_NewRef(PyList_GET_ITEM(rec, R_OUT_IDX));
        values[8] = Py_NewRef(PyList_GET_ITEM(rec, R_N_OUT));
        values[9] = Py_NewRef(PyTuple_GET_ITEM(entry, 0));
        values[10] = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
        values[11] = Py_NewRef(stack);
        values[12] = unique_of(PyList_GET_ITEM(rec, R_PARAMS), unique);
        values[13] = unique_of(PyList_GET_ITEM(rec, R_WRITES), unique);
        values[14] = Py_NewRef(PyList_GET_ITEM(rec, R_INPLACE));
        values[15] = cached(sites, PyList_GET_ITEM(rec, R_SITE), make_site);
        values[16] = Py_NewRef(PyList_GET_ITEM(rec, R_IO));
        values[17] = Py_NewRef(PyList_GET_ITEM(templates, idx));
        Py_DECREF(entry);
        int failed = 0;
        for (Py_ssize_t f = 0; f < OP_FILLED; f++)
            failed |= values[f] == NULL;
        for (Py_ssize_t f = OP_FILLED; f < op_width; f++)
            values[f] = Py_NewRef(Py_None);
        if (failed) {
            for (Py_ssize_t f = 0; f < op_width; f++)
                Py_XDECREF(values[f]);
            goto error;
        }
        PyObject *op = new_slotted(op_type, op_offsets, values, op_width);
        if (op == NULL)
            goto error;
        PyList_SET_ITEM(ops, idx, op);
    }
    return ops;
error:
    Py_DECREF(ops);  /* unset items are NULL, which list deallocation skips */
    return NULL;
}

/* ---- module_scopes: one ModuleScope per module (capture.build._modules) --------------------------- */

static PyTypeObject *call_type = NULL, *scope_type = NULL;
static Py_ssize_t call_offsets[5], scope_offsets[6];
static PyObject *str_modules = NULL, *str_training = NULL;

/* configure_modules(ModuleCallRecord, its slot descriptors, ModuleScope, its slot descriptors) */
static PyObject *
configure_modules(PyObject *self, PyObject *args)
{
    PyObject *call, *call_d, *scope, *scope_d;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:configure_modules", &PyType_Type, &call, &PyTuple_Type, &call_d, &PyType_Type,
                          &scope, &PyTuple_Type, &scope_d))
        return NULL;
    if (PyTuple_GET_SIZE(call_d) != 5 || PyTuple_GET_SIZE(scope_d) != 6 || slot_offsets(call_d, call_offsets, 5) < 0 ||
        slot_offsets(scope_d, scope_offsets, 6) < 0) {
        PyErr_SetString(PyExc_TypeError, "configure_modules: ModuleCallRecord (5 fields) and ModuleScope (6 fields) "
                                         "must be slotted classes of object fields");
        return NULL;
    }
    Py_XSETREF(call_type, (PyTypeObject *)Py_NewRef(call));
    Py_XSETREF(scope_type, (PyTypeObject *)Py_NewRef(scope));
    Py_RETURN_NONE;
}

/* The labels of a tuple of op indices, as a tuple (new reference). */
static PyObject *
labels_of(PyObject *indices, PyObject *labels)
{
    if (!PyTuple_Check(indices)) {
        PyErr_SetString(PyExc_TypeError, "module_scopes: a module call's op indices must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(indices);
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *label = label_at(labels, PyTuple_GET_ITEM(indices, i));
        if (label == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, Py_NewRef(label));
    }
    return out;
}

/* One ModuleCallRecord from a session's (call, input indices, output indices, first op, last op) entry. */
static PyObject *
module_call(PyObject *entry, PyObject *labels)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5) {
        PyErr_SetString(PyExc_TypeError, "module_scopes: a module call must be (call, inputs, outputs, first, last)");
        return NULL;
    }
    PyObject *first = PyTuple_GET_ITEM(entry, 3), *last = PyTuple_GET_ITEM(entry, 4);
    int empty = PyObject_RichCompareBool(first, last, Py_GT);  /* no op inside the call: both -1 */
    if (empty < 0)
        return NULL;
    PyObject *values[5] = {Py_NewRef(PyTuple_GET_ITEM(entry, 0)), labels_of(PyTuple_GET_ITEM(entry, 1), labels),
                           labels_of(PyTuple_GET_ITEM(entry, 2), labels), NULL, NULL};
    values[3] = empty ? PyLong_FromLong(-1) : Py_NewRef(first);
    values[4] = empty ? PyLong_FromLong(-1) : Py_NewRef(last);
    if (values[1] == NULL || values[2] == NULL || values[3] == NULL || values[4] == NULL) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    return new_slotted(call_type, call_offsets, values, 5);
}

/* The ModuleCallRecords of one module's calls, in call order (new reference). */
static PyObject *
module_calls_of(PyObject *made, PyObject *labels)
{
    if (made == NULL)
        return PyTuple_New(0);
    if (!PyList_Check(made)) {
        PyErr_SetString(PyExc_TypeError, "module_scopes: a module's calls must be a list");
        return NULL;
    }
    PyObject *ordered = PyList_GetSlice(made, 0, PyList_GET_SIZE(made));  /* sorted without touching the session's */
    if (ordered == NULL || PyList_Sort(ordered) < 0) {
        Py_XDECREF(ordered);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(ordered);
    PyObject *calls = PyTuple_New(n);
    for (Py_ssize_t i = 0; calls != NULL && i < n; i++) {
        PyObject *call = module_call(PyList_GET_ITEM(ordered, i), labels);
        if (call == NULL)
            Py_CLEAR(calls);
        else
            PyTuple_SET_ITEM(calls, i, call);
    }
    Py_DECREF(ordered);
    return calls;
}

/* The canonical addresses of a module's children that live under `addr` (new reference). `subs` is the
 * module's `_modules`: a dict, or a mapping (a TorchScript module's) whose values() are read. */
static PyObject *
children_of(PyObject *addr, PyObject *subs, PyObject *addr_of)
{
    PyObject *values = PyDict_Check(subs) ? PyDict_Values(subs) : PyMapping_Values(subs);
    if (values == NULL)
        return NULL;
    PyObject *found = PyList_New(0);
    Py_ssize_t alen = PyUnicode_GET_LENGTH(addr);
    for (Py_ssize_t i = 0; found != NULL && i < PyList_GET_SIZE(values); i++) {
        PyObject *child = PyList_GET_ITEM(values, i);
        if (child == Py_None)
            continue;
        PyObject *id = PyLong_FromVoidPtr(child);
        PyObject *path = id == NULL ? NULL : PyDict_GetItemWithError(addr_of, id);
        Py_XDECREF(id);
        if (path == NULL) {
            if (PyErr_Occurred())
                Py_CLEAR(found);
            continue;
        }
        if (!PyUnicode_Check(path)) {
            PyErr_SetString(PyExc_TypeError, "module_scopes: a module address must be a str");
            Py_CLEAR(found);
            break;
        }
        Py_ssize_t dot = PyUnicode_FindChar(path, '.', 0, PyUnicode_GET_LENGTH(path), -1);
        if (dot == -2) {
            Py_CLEAR(found);
            break;
        }
        /* path.rpartition(".")[0] == addr */
        int under = dot < 0 ? alen == 0 : dot == alen && PyUnicode_Tailmatch(path, addr, 0, dot, -1) == 1;
        if (under && PyList_Append(found, path) < 0)
            Py_CLEAR(found);
    }
    Py_DECREF(values);
    if (found == NULL)
        return NULL;
    PyObject *children = PyList_AsTuple(found);
    Py_DECREF(found);
    return children;
}

/* The part of an address before its last dot ("" for a top-level name), borrowed into `*owner` as a new
 * reference. */
static int
owner_of(PyObject *address, PyObject **owner)
{
    if (!PyUnicode_Check(address)) {
        PyErr_SetString(PyExc_TypeError, "an address must be a str");
        return -1;
    }
    Py_ssize_t dot = PyUnicode_FindChar(address, '.', 0, PyUnicode_GET_LENGTH(address), -1);
    if (dot == -2)
        return -1;
    *owner = PyUnicode_Substring(address, 0, dot < 0 ? 0 : dot);
    return *owner == NULL ? -1 : (int)(dot < 0 ? 0 : dot + 1);  /* where the local name starts */
}

/* Module address -> the full addresses of the parameters and buffers registered on it, from the
 * session's `tied` (first address -> its other addresses), in its order. */
static PyObject *
own_params_of(PyObject *tied)
{
    PyObject *own = PyDict_New(), *first, *others;
    Py_ssize_t pos = 0;
    while (own != NULL && PyDict_Next(tied, &pos, &first, &others)) {
        if (!PyList_Check(others) && !PyTuple_Check(others)) {
            PyErr_SetString(PyExc_TypeError, "module_scopes: tied addresses must be a list");
            Py_CLEAR(own);
            break;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(others);
        for (Py_ssize_t i = -1; own != NULL && i < n; i++) {
            PyObject *full = i < 0 ? first : PySequence_Fast_GET_ITEM(others, i), *owner = NULL;
            if (owner_of(full, &owner) < 0) {
                Py_CLEAR(own);
                break;
            }
            PyObject *list = PyDict_GetItemWithError(own, owner);
            if (list == NULL && !PyErr_Occurred()) {
                list = PyList_New(0);
                if (list != NULL && PyDict_SetItem(own, owner, list) < 0)
                    Py_CLEAR(list);
                Py_XDECREF(list);  /* the dict holds it */
            }
            if (list == NULL || PyList_Append(list, full) < 0)
                Py_CLEAR(own);
            Py_DECREF(owner);
        }
    }
    return own;
}

/* module_scopes(named, module_calls, labels, tied, addr_of) -> dict
 *
 * `_modules`' loop: for each (address, module) of `named`, its ModuleScope (class name, own parameters,
 * children, calls with op labels, training flag). */
static PyObject *
module_scopes(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 5 || !PyDict_Check(argv[0]) || !PyDict_Check(argv[1]) || !PyList_CheckExact(argv[2]) ||
        !PyDict_Check(argv[3]) || !PyDict_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "module_scopes(named: dict, module_calls: dict, labels: list, tied: dict, "
                                         "addr_of: dict)");
        return NULL;
    }
    if (scope_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._assembly.module_scopes is not configured");
        return NULL;
    }
    PyObject *named = argv[0], *module_calls = argv[1], *labels = argv[2], *addr_of = argv[4];
    PyObject *own_params = own_params_of(argv[3]);
    if (own_params == NULL)
        return NULL;
    PyObject *scopes = PyDict_New(), *addr, *module;
    Py_ssize_t pos = 0;
    while (scopes != NULL && PyDict_Next(named, &pos, &addr, &module)) {
        if (!PyUnicode_Check(addr)) {
            PyErr_SetString(PyExc_TypeError, "module_scopes: a module address must be a str");
            goto error;
        }
        PyObject *values[6] = {Py_NewRef(addr), NULL, NULL, NULL, NULL, NULL};
        PyObject *subs = PyObject_GetAttr(module, str_modules);
        PyObject *made = PyDict_GetItemWithError(module_calls, addr);
        PyObject *own = made == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(own_params, addr);
        if (!PyErr_Occurred()) {
            values[1] = PyType_GetName(Py_TYPE(module));
            values[2] = own == NULL ? PyTuple_New(0) : PySequence_Tuple(own);
            int some = subs == NULL ? -1 : PyObject_IsTrue(subs);  /* most modules are leaves */
            values[3] = some < 0 ? NULL : some ? children_of(addr, subs, addr_of) : PyTuple_New(0);
            values[4] = module_calls_of(made, labels);
            values[5] = PyObject_GetAttr(module, str_training);
        }
        Py_XDECREF(subs);
        int failed = 0;
        for (int i = 0; i < 6; i++)
            failed |= values[i] == NULL;
        if (failed) {
            for (int i = 0; i < 6; i++)
                Py_XDECREF(values[i]);
            goto error;
        }
        PyObject *scope = new_slotted(scope_type, scope_offsets, values, 6);
        if (scope == NULL || PyDict_SetItem(scopes, addr, scope) < 0) {
            Py_XDECREF(scope);
            goto error;
        }
        Py_DECREF(scope);
    }
    Py_DECREF(own_params);
    return scopes;
error:
    Py_XDECREF(scopes);
    Py_DECREF(own_params);
    return NULL;
}

/* ---- param_records: one ParamRecord per parameter and buffer (capture.build._params) --------------- */

static PyTypeObject *param_type = NULL;
static Py_ssize_t param_offsets[8];  /* address, shape, dtype, device, requires_grad, is_buffer, tied, layout */
static PyObject *str_parameters = NULL, *str_buffers = NULL, *str_shape = NULL, *str_dtype = NULL, *str_device = NULL,
    *str_requires_grad = NULL;

/* configure_params(ParamRecord, its slot descriptors) */
static PyObject *
configure_params(PyObject *self, PyObject *args)
{
    PyObject *type, *descr;
    if (!PyArg_ParseTuple(args, "O!O!:configure_params", &PyType_Type, &type, &PyTuple_Type, &descr))
        return NULL;
    if (PyTuple_GET_SIZE(descr) != 8 || slot_offsets(descr, param_offsets, 8) < 0) {
        PyErr_SetString(PyExc_TypeError, "configure_params: ParamRecord must be a slotted class of 8 object fields");
        return NULL;
    }
    Py_XSETREF(param_type, (PyTypeObject *)Py_NewRef(type));
    Py_RETURN_NONE;
}

/* `table[name]` of a module's plain-dict table (borrowed; NULL without error: absent or not a plain dict). */
static PyObject *
table_entry(PyObject *module, PyObject *table, PyObject *name)
{
    PyObject *tensors = PyObject_GetAttr(module, table);
    if (tensors == NULL)
        return NULL;
    PyObject *t = PyDict_CheckExact(tensors) ? PyDict_GetItemWithError(tensors, name) : NULL;
    Py_DECREF(tensors);  /* the module holds the table, the table the tensor */
    return t == Py_None ? NULL : t;
}

/* `cache[key]`, or `make(key)` on a miss (new reference). */
static PyObject *
text_of(PyObject *key, PyObject *cache, PyObject *make)
{
    if (key == NULL)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(cache, key);
    if (hit != NULL)
        return Py_NewRef(hit);
    return PyErr_Occurred() ? NULL : PyObject_CallOneArg(make, key);
}

/* One ParamRecord for tensor `t` at `address` (new reference). */
static PyObject *
param_record(PyObject *address, PyObject *t, int is_buffer, PyObject *others, PyObject **texts)
{
    PyObject *shape = PyObject_GetAttr(t, str_shape), *dtype = PyObject_GetAttr(t, str_dtype),
             *device = PyObject_GetAttr(t, str_device), *grad = PyObject_GetAttr(t, str_requires_grad);
    int rg = grad == NULL ? -1 : PyObject_IsTrue(grad);
    PyObject *values[8] = {Py_NewRef(address), shape == NULL ? NULL : PySequence_Tuple(shape),
                           text_of(dtype, texts[0], texts[1]), text_of(device, texts[2], texts[3]),
                           rg < 0 ? NULL : Py_NewRef(rg ? Py_True : Py_False), Py_NewRef(is_buffer ? Py_True : Py_False),
                           PySequence_Tuple(others), Py_NewRef(Py_None)};
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(device);
    Py_XDECREF(grad);
    int failed = 0;
    for (int i = 0; i < 8; i++)
        failed |= values[i] == NULL;
    if (failed) {
        for (int i = 0; i < 8; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    return new_slotted(param_type, param_offsets, values, 8);
}

/* param_records(tied, named, dtype_texts, dtype_text, device_texts, device_text) -> dict, or None
 *
 * `_params`' loop: each first address of `tied` read from its module in `named` as the module holds it
 * now (a parameter, else a buffer). None where one is not there or a table is no plain dict (the
 * Python walks the model instead). */
static PyObject *
param_records(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 6 || !PyDict_Check(argv[0]) || !PyDict_Check(argv[1]) || !PyDict_Check(argv[2]) || !PyDict_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "param_records(tied: dict, named: dict, dtype_texts: dict, dtype_text, "
                                         "device_texts: dict, device_text)");
        return NULL;
    }
    if (param_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer.capture._assembly.param_records is not configured");
        return NULL;
    }
    PyObject *tied = argv[0], *named = argv[1], *texts[4] = {argv[2], argv[3], argv[4], argv[5]};
    PyObject *records = PyDict_New(), *address, *others;
    Py_ssize_t pos = 0;
    while (records != NULL && PyDict_Next(tied, &pos, &address, &others)) {
        PyObject *owner = NULL;
        int start = owner_of(address, &owner);
        if (start < 0) {
            Py_CLEAR(records);
            break;
        }
        PyObject *module = PyDict_GetItemWithError(named, owner);
        Py_DECREF(owner);
        PyObject *name = module == NULL ? NULL : PyUnicode_Substring(address, start, PyUnicode_GET_LENGTH(address));
        PyObject *t = name == NULL ? NULL : table_entry(module, str_parameters, name);
        int is_buffer = t == NULL;
        if (t == NULL && name != NULL && !PyErr_Occurred())
            t = table_entry(module, str_buffers, name);
        Py_XDECREF(name);
        if (t == NULL) {
            if (PyErr_Occurred()) {
                Py_CLEAR(records);
                break;
            }
            Py_DECREF(records);
            Py_RETURN_NONE;  /* not where it was found: the Python walks the model */
        }
        PyObject *record = param_record(address, t, is_buffer, others, texts);
        if (record == NULL || PyDict_SetItem(records, address, record) < 0)
            Py_CLEAR(records);
        Py_XDECREF(record);
    }
    return records;
}

/* configure_records(RECORD_FIELDS): the raw record's field positions, from the contract's field names. */
static PyObject *
configure_records(PyObject *self, PyObject *fields)
{
    if (record_positions(fields) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure_records", configure_records, METH_O, "configure_records(RECORD_FIELDS): the record's field positions"},
    {"op_labels", op_labels, METH_O, "op_labels(records): `<kind>_<n>` per record."},
    {"configure_templates", configure_templates, METH_VARARGS, "configure_templates(CallTemplate, its slot descriptors)"},
    {"call_templates", (PyCFunction)(void (*)(void))call_templates, METH_FASTCALL,
     "call_templates(records, snapshots, detach): one template per call."},
    {"configure_build", configure_build, METH_VARARGS, "configure_build(Op, its slot descriptors, Edge, its, root entry)"},
    {"build_ops", (PyCFunction)(void (*)(void))build_ops, METH_FASTCALL, "A finished capture's records as Ops."},
    {"configure_params", configure_params, METH_VARARGS, "configure_params(ParamRecord, its slot descriptors)"},
    {"param_records", (PyCFunction)(void (*)(void))param_records, METH_FASTCALL,
     "param_records(tied, named, dtype_texts, dtype_text, device_texts, device_text): one ParamRecord per tensor."},
    {"configure_modules", configure_modules, METH_VARARGS,
     "configure_modules(ModuleCallRecord, its slot descriptors, ModuleScope, its slot descriptors)"},
    {"module_scopes", (PyCFunction)(void (*)(void))module_scopes, METH_FASTCALL,
     "module_scopes(named, module_calls, labels, tied, addr_of): one ModuleScope per module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_assembly", "A finished capture's records as trace objects, in C.",
                                    -1, methods};

#ifndef TLX_SOURCE_DIGEST  /* the digest of this file's sources, passed by setup.py (kernel/native.py compares it) */
#define TLX_SOURCE_DIGEST ""
#endif

PyMODINIT_FUNC
PyInit__assembly(void)
{
    str_entry = PyUnicode_InternFromString("entry");
    str_modules = PyUnicode_InternFromString("_modules");
    str_training = PyUnicode_InternFromString("training");
    str_parameters = PyUnicode_InternFromString("_parameters");
    str_buffers = PyUnicode_InternFromString("_buffers");
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_device = PyUnicode_InternFromString("device");
    str_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (str_entry == NULL || str_modules == NULL || str_training == NULL || str_parameters == NULL || str_buffers == NULL ||
        str_shape == NULL || str_dtype == NULL || str_device == NULL || str_requires_grad == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", TLX_SOURCE_DIGEST) < 0)
        Py_CLEAR(m);
    return m;
}
