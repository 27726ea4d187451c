/* The model walks of a capture in C (issue 18): `capture.walk`'s named_modules, first_visits and
 * named_state, which every capture runs before its forward (and some after it). Optional, like
 * `_hotpath.c`: `walk.py` runs its own Python when this module is not built, and each function here
 * returns None where a module's table is not a plain dict (the Python then walks), so both walk the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *str_modules = NULL;

/* `prefix.name`, or `name` when the prefix is empty (new reference). */
static PyObject *
dotted(PyObject *prefix, PyObject *name)
{
    Py_ssize_t np = PyUnicode_GET_LENGTH(prefix), nn = PyUnicode_GET_LENGTH(name);
    if (np == 0)
        return Py_NewRef(name);
    Py_UCS4 max = PyUnicode_MAX_CHAR_VALUE(prefix) > PyUnicode_MAX_CHAR_VALUE(name) ? PyUnicode_MAX_CHAR_VALUE(prefix)
                                                                                  : PyUnicode_MAX_CHAR_VALUE(name);
    PyObject *out = PyUnicode_New(np + 1 + nn, max);
    if (out == NULL || PyUnicode_CopyCharacters(out, 0, prefix, 0, np) < 0 ||
        PyUnicode_WriteChar(out, np, '.') < 0 || PyUnicode_CopyCharacters(out, np + 1, name, 0, nn) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

/* Whether `seen` (a set of ids) already holds `o`'s id; otherwise add it when `add` (-1: error). */
static int
seen_before(PyObject *seen, PyObject *o, int add)
{
    PyObject *id = PyLong_FromVoidPtr(o);
    if (id == NULL)
        return -1;
    int hit = PySet_Contains(seen, id);
    if (hit == 0 && add && PySet_Add(seen, id) < 0)
        hit = -1;
    Py_DECREF(id);
    return hit;
}

/* A (str, object) pair (new reference; steals `name`). */
static PyObject *
pair(PyObject *name, PyObject *o)
{
    if (name == NULL)
        return NULL;
    PyObject *p = PyTuple_Pack(2, name, o);
    Py_DECREF(name);
    return p;
}

/* named_modules(model, remove_duplicate) -> list of (address, module), or None (a `_modules` that is no dict) */
static PyObject *
named_modules(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "named_modules(model, remove_duplicate)");
        return NULL;
    }
    int dedup = PyObject_IsTrue(argv[1]);
    if (dedup < 0)
        return NULL;
    PyObject *found = PyList_New(0), *seen = PySet_New(NULL), *stack = PyList_New(0), *result = NULL;
    if (found == NULL || seen == NULL || stack == NULL)
        goto done;
    PyObject *root = pair(PyUnicode_New(0, 0), argv[0]);
    if (root == NULL || PyList_Append(stack, root) < 0) {
        Py_XDECREF(root);
        goto done;
    }
    Py_DECREF(root);
    while (PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *entry = Py_NewRef(PyList_GET_ITEM(stack, top));
        if (PyList_SetSlice(stack, top, top + 1, NULL) < 0) {
            Py_DECREF(entry);
            goto done;
        }
        PyObject *prefix = PyTuple_GET_ITEM(entry, 0), *module = PyTuple_GET_ITEM(entry, 1);
        int hit = dedup ? seen_before(seen, module, 1) : 0;
        if (hit != 0 || PyList_Append(found, entry) < 0) {
            Py_DECREF(entry);
            if (hit > 0)
                continue;
            goto done;
        }
        PyObject *subs = PyObject_GetAttr(module, str_modules);
        if (subs == NULL) {
            Py_DECREF(entry);
            goto done;
        }
        if (!PyDict_CheckExact(subs)) {
            Py_DECREF(subs);
            Py_DECREF(entry);
            result = Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t first = PyList_GET_SIZE(stack), pos = 0;
        PyObject *name, *child;
        int failed = 0;
        while (!failed && PyDict_Next(subs, &pos, &name, &child)) {
            if (child == Py_None)
                continue;
            if (!PyUnicode_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "named_modules: a child module's name must be a str");
                failed = 1;
                break;
            }
            PyObject *p = pair(dotted(prefix, name), child);
            failed = p == NULL || PyList_Append(stack, p) < 0;
            Py_XDECREF(p);
        }
        Py_DECREF(subs);
        Py_DECREF(entry);
        if (failed)
            goto done;
        /* pushed in order: reversed, the first child is popped first */
        for (Py_ssize_t i = first, j = PyList_GET_SIZE(stack) - 1; i < j; i++, j--) {
            PyObject *tmp = PyList_GET_ITEM(stack, i);
            PyList_SET_ITEM(stack, i, PyList_GET_ITEM(stack, j));
            PyList_SET_ITEM(stack, j, tmp);
        }
    }
    result = Py_NewRef(found);
done:
    Py_XDECREF(found);
    Py_XDECREF(seen);
    Py_XDECREF(stack);
    return result;
}

/* first_visits(walked) -> list: the (address, module) pairs of a walk, each module at its first address */
static PyObject *
first_visits(PyObject *self, PyObject *walked)
{
    if (!PyList_CheckExact(walked)) {
        PyErr_SetString(PyExc_TypeError, "first_visits(walked: list)");
        return NULL;
    }
    PyObject *found = PyList_New(0), *seen = PySet_New(NULL);
    for (Py_ssize_t i = 0; found != NULL && seen != NULL && i < PyList_GET_SIZE(walked); i++) {
        PyObject *entry = PyList_GET_ITEM(walked, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "first_visits: a walk holds (address, module) pairs");
            Py_CLEAR(found);
            break;
        }
        int hit = seen_before(seen, PyTuple_GET_ITEM(entry, 1), 1);
        if (hit < 0 || (hit == 0 && PyList_Append(found, entry) < 0))
            Py_CLEAR(found);
    }
    Py_XDECREF(seen);
    return found;
}

/* named_state(walked, table, remove_duplicate) -> list of (address, tensor), or None (a table that is no dict) */
static PyObject *
named_state(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 3 || !PyList_CheckExact(argv[0]) || !PyUnicode_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "named_state(walked: list, table: str, remove_duplicate)");
        return NULL;
    }
    PyObject *walked = argv[0], *table = argv[1];
    int dedup = PyObject_IsTrue(argv[2]);
    if (dedup < 0)
        return NULL;
    PyObject *found = PyList_New(0), *seen = PySet_New(NULL), *result = NULL;
    if (found == NULL || seen == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(walked); i++) {
        PyObject *entry = PyList_GET_ITEM(walked, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))) {
            PyErr_SetString(PyExc_TypeError, "named_state: a walk holds (address, module) pairs");
            goto done;
        }
        PyObject *tensors = PyObject_GetAttr(PyTuple_GET_ITEM(entry, 1), table);
        if (tensors == NULL)
            goto done;
        if (!PyDict_CheckExact(tensors)) {
            Py_DECREF(tensors);
            result = Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t pos = 0;
        PyObject *name, *t;
        int failed = 0;
        while (!failed && PyDict_Next(tensors, &pos, &name, &t)) {
            if (t == Py_None)
                continue;
            int hit = dedup ? seen_before(seen, t, 1) : 0;
            if (hit != 0) {
                failed = hit < 0;
                continue;
            }
            if (!PyUnicode_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "named_state: a tensor's name must be a str");
                failed = 1;
                break;
            }
            PyObject *p = pair(dotted(PyTuple_GET_ITEM(entry, 0), name), t);
            failed = p == NULL || PyList_Append(found, p) < 0;
            Py_XDECREF(p);
        }
        Py_DECREF(tensors);
        if (failed)
            goto done;
    }
    result = Py_NewRef(found);
done:
    Py_XDECREF(found);
    Py_XDECREF(seen);
    return result;
}

static PyMethodDef methods[] = {
    {"named_modules", (PyCFunction)(void (*)(void))named_modules, METH_FASTCALL,
     "named_modules(model, remove_duplicate): torch's named_modules() order, iteratively."},
    {"first_visits", first_visits, METH_O, "first_visits(walked): each module at its first address."},
    {"named_state", (PyCFunction)(void (*)(void))named_state, METH_FASTCALL,
     "named_state(walked, table, remove_duplicate): the tensors of each module's table, by address."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", "A capture's model walks, in C.", -1, methods};

#ifndef TLX_SOURCE_DIGEST  /* the digest of this file's sources, passed by setup.py (kernel/native.py compares it) */
#define TLX_SOURCE_DIGEST ""
#endif

PyMODINIT_FUNC
PyInit__walk(void)
{
    str_modules = PyUnicode_InternFromString("_modules");
    if (str_modules == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", TLX_SOURCE_DIGEST) < 0)
        Py_CLEAR(m);
    return m;
}
