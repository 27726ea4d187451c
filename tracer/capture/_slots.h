/* Slotted classes filled from C: the byte offsets of their fields and a new instance with its slots set
 * (shared by the capture's extensions, `_hotpath.c` and `_assembly.c`), and the raw record's field positions. */
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

/* The raw op record: the fields the C knows, by name. Their positions are not compiled in: the Python contract
 * (`tracer/capture/kernel/contract.py`, RECORD_FIELDS) defines the order once and `record_positions` reads it
 * when the kernel is configured; a contract with a field the C does not know (or without one it fills) makes
 * the configure call raise, and the capture falls back to the Python kernel with one warning. */
enum { F_INFO, F_PARENTS, F_TENSOR, F_META, F_CALL, F_OUT_IDX, F_N_OUT, F_STACK, F_PARAMS, F_WRITES, F_INPLACE,
       F_SITE, F_IO, F_CALLSPEC, F_ARGS, F_KWARGS, N_RECORD_FIELDS };
static const char *const record_field_names[N_RECORD_FIELDS] = {
    "info", "parents", "tensor", "meta", "call", "out_idx", "n_out", "stack", "params", "writes", "inplace",
    "site", "io", "callspec", "args", "kwargs"};
static Py_ssize_t record_pos[N_RECORD_FIELDS];
static Py_ssize_t record_len = 0;  /* the record's width; 0 until configured */
#define R_INFO (record_pos[F_INFO])
#define R_PARENTS (record_pos[F_PARENTS])
#define R_TENSOR (record_pos[F_TENSOR])
#define R_META (record_pos[F_META])
#define R_CALL (record_pos[F_CALL])
#define R_OUT_IDX (record_pos[F_OUT_IDX])
#define R_N_OUT (record_pos[F_N_OUT])
#define R_STACK (record_pos[F_STACK])
#define R_PARAMS (record_pos[F_PARAMS])
#define R_WRITES (record_pos[F_WRITES])
#define R_INPLACE (record_pos[F_INPLACE])
#define R_SITE (record_pos[F_SITE])
#define R_IO (record_pos[F_IO])
#define R_CALLSPEC (record_pos[F_CALLSPEC])
#define R_ARGS (record_pos[F_ARGS])
#define R_KWARGS (record_pos[F_KWARGS])

/* Read the record's field positions from the contract's tuple of field names: 0, or -1 with ValueError. */
static int
record_positions(PyObject *fields)
{
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != N_RECORD_FIELDS) {
        PyErr_Format(PyExc_ValueError, "the C kernel fills a record of %d named fields; the contract's is not that",
                     (int)N_RECORD_FIELDS);
        return -1;
    }
    Py_ssize_t pos[N_RECORD_FIELDS];
    for (int f = 0; f < N_RECORD_FIELDS; f++) {
        pos[f] = -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
            PyObject *name = PyTuple_GET_ITEM(fields, i);
            if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, record_field_names[f]) == 0)
                pos[f] = i;
        }
        if (pos[f] < 0) {
            PyErr_Format(PyExc_ValueError, "the contract's record has no field '%s', which the C kernel fills",
                         record_field_names[f]);
            return -1;
        }
    }
    memcpy(record_pos, pos, sizeof(pos));
    record_len = N_RECORD_FIELDS;
    return 0;
}

#endif
