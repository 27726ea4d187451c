/* Slotted classes filled from C: the byte offsets of their fields and a new instance with its slots set
 * (shared by the capture's extensions, `_hotpath.c` and `_assembly.c`). */
#ifndef TRACER_CAPTURE_SLOTS_H
#define TRACER_CAPTURE_SLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* The byte offsets of a slotted class's fields, from its member descriptors (in field order). */
static int
slot_offsets(PyObject *descriptors, Py_ssize_t *out, Py_ssize_t max)
{
    if (!PyTuple_Check(descriptors) || PyTuple_GET_SIZE(descriptors) > max)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(descriptors); i++) {
        PyObject *d = PyTuple_GET_ITEM(descriptors, i);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX)
            return -1;
        out[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}

/* A new instance of a slotted class with its slots set (each value a new reference, stolen; on failure
 * all of them are released). */
static PyObject *
new_slotted(PyTypeObject *type, const Py_ssize_t *offsets, PyObject **values, Py_ssize_t n)
{
    PyObject *o = type->tp_alloc(type, 0);
    if (o == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        *(PyObject **)((char *)o + offsets[i]) = values[i];
    return o;
}

#endif
