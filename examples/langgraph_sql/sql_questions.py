"""Generated questions for ``--train``: every template asked about every value of its kind.

The 30 shipped questions are too few to learn from and to validate on, so :func:`generated`
asks more about the same database: each of :data:`TEMPLATES` (a question with a slot, and its
gold SQL) is filled with every value its slot can take, read from the database (each
department, employee, customer, country, product, category, city and job title). A question
whose gold query returns no rows is left out (any query that finds nothing would match it).

Templates of one kind are **siblings** (the employees of a department, their number, their
average salary, ...): each question carries ``wrong``, a near miss, the gold SQL of its kind's
first sibling (in :data:`TEMPLATES`' order) that returns other rows on the same value. It is
the habit of a sloppy teacher (:mod:`sql_training`): for a question it does not read closely, it
writes the query it writes most for that kind of name (a department's employees, an employee's
manager, ...), which runs, on the right value, and answers another question.

:func:`drills` asks each template about the names of the *other* kinds ("What is the budget
of the Ada Fischer department?"): questions whose queries find nothing (or count zero) and
which nobody scores, for the warm-up only. The teacher answers them as it answers any
question, which shows the model that the wording picks the query and the name only fills its
slot.

:func:`split` holds out a quarter of each template's questions for validation: questions the
model never saw, of templates it did.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import company_db

__all__ = ["TEMPLATES", "Template", "drills", "generated", "split", "values"]

Kind = Literal[
    "department", "employee", "customer", "country", "product", "category", "city", "title"
]


@dataclass(frozen=True)
class Template:
    """A question with one slot, ``{v}``, and its gold SQL with the same slot."""

    id: str
    kind: Kind
    question: str
    sql: str


_EMP_DEPT = "FROM employees AS e JOIN departments AS d ON e.department_id = d.id"
_ORD_CUST = "FROM orders AS o JOIN customers AS c ON o.customer_id = c.id"
_ORD_PROD = "FROM orders AS o JOIN products AS p ON o.product_id = p.id"

TEMPLATES: tuple[Template, ...] = (
    Template("dept-staff", "department", "List the names of the employees in the {v} department.",
             f"SELECT e.name {_EMP_DEPT} WHERE d.name = '{{v}}'"),
    Template("dept-count", "department", "How many employees work in the {v} department?",
             f"SELECT COUNT(*) {_EMP_DEPT} WHERE d.name = '{{v}}'"),
    Template("dept-avg", "department", "What is the average salary in the {v} department?",
             f"SELECT AVG(e.salary) {_EMP_DEPT} WHERE d.name = '{{v}}'"),
    Template("dept-max", "department", "What is the highest salary in the {v} department?",
             f"SELECT MAX(e.salary) {_EMP_DEPT} WHERE d.name = '{{v}}'"),
    Template("dept-city", "department", "In which city is the {v} department?",
             "SELECT city FROM departments WHERE name = '{v}'"),
    Template("dept-budget", "department", "What is the budget of the {v} department?",
             "SELECT budget FROM departments WHERE name = '{v}'"),
    Template("emp-manager", "employee", "Who is {v}'s manager?",
             "SELECT m.name FROM employees AS e JOIN employees AS m ON e.manager_id = m.id "
             "WHERE e.name = '{v}'"),
    Template("emp-title", "employee", "What is {v}'s job title?",
             "SELECT title FROM employees WHERE name = '{v}'"),
    Template("emp-salary", "employee", "What is {v}'s salary?",
             "SELECT salary FROM employees WHERE name = '{v}'"),
    Template("emp-hired", "employee", "When was {v} hired?",
             "SELECT hire_date FROM employees WHERE name = '{v}'"),
    Template("emp-dept", "employee", "In which department does {v} work?",
             f"SELECT d.name {_EMP_DEPT} WHERE e.name = '{{v}}'"),
    Template("cust-country", "customer", "Which country is {v} from?",
             "SELECT country FROM customers WHERE name = '{v}'"),
    Template("cust-orders", "customer", "How many orders did {v} place?",
             f"SELECT COUNT(*) {_ORD_CUST} WHERE c.name = '{{v}}'"),
    Template("cust-units", "customer", "How many units did {v} order in all?",
             f"SELECT SUM(o.quantity) {_ORD_CUST} WHERE c.name = '{{v}}'"),
    Template("country-names", "country", "Which customers are from {v}?",
             "SELECT name FROM customers WHERE country = '{v}'"),
    Template("country-count", "country", "How many customers are from {v}?",
             "SELECT COUNT(*) FROM customers WHERE country = '{v}'"),
    Template("prod-price", "product", "What is the price of the {v}?",
             "SELECT price FROM products WHERE name = '{v}'"),
    Template("prod-category", "product", "Which category is the {v} in?",
             "SELECT category FROM products WHERE name = '{v}'"),
    Template("prod-units", "product", "How many units of the {v} were ordered?",
             f"SELECT SUM(o.quantity) {_ORD_PROD} WHERE p.name = '{{v}}'"),
    Template("prod-orders", "product", "How many orders were placed for the {v}?",
             f"SELECT COUNT(*) {_ORD_PROD} WHERE p.name = '{{v}}'"),
    Template("cat-names", "category", "List the products in the {v} category.",
             "SELECT name FROM products WHERE category = '{v}'"),
    Template("cat-count", "category", "How many products are in the {v} category?",
             "SELECT COUNT(*) FROM products WHERE category = '{v}'"),
    Template("cat-cheapest", "category", "What is the cheapest product in the {v} category?",
             "SELECT name FROM products WHERE category = '{v}' ORDER BY price LIMIT 1"),
    Template("city-depts", "city", "Which departments are in {v}?",
             "SELECT name FROM departments WHERE city = '{v}'"),
    Template("city-count", "city", "How many employees work in {v}?",
             f"SELECT COUNT(*) {_EMP_DEPT} WHERE d.city = '{{v}}'"),
    Template("title-names", "title", "Which employees have the job title {v}?",
             "SELECT name FROM employees WHERE title = '{v}'"),
    Template("title-count", "title", "How many employees have the job title {v}?",
             "SELECT COUNT(*) FROM employees WHERE title = '{v}'"),
)  # fmt: skip
"""Every kind has two templates or more, so every question has a sibling to confuse it with."""

_VALUES: dict[Kind, str] = {
    "department": "SELECT name FROM departments ORDER BY id",
    "employee": "SELECT name FROM employees ORDER BY id",
    "customer": "SELECT name FROM customers ORDER BY id",
    "country": "SELECT DISTINCT country FROM customers ORDER BY country",
    "product": "SELECT name FROM products ORDER BY id",
    "category": "SELECT DISTINCT category FROM products ORDER BY category",
    "city": "SELECT DISTINCT city FROM departments ORDER BY city",
    "title": "SELECT DISTINCT title FROM employees ORDER BY title",
}


def values(kind: Kind | None = None) -> list[str]:
    """The values a slot of ``kind`` takes (every kind's, longest first, when ``None``)."""
    if kind is not None:
        return [str(row[0]) for row in company_db.execute(_VALUES[kind])]
    every = {value for k in _VALUES for value in values(k)}
    return sorted(every, key=lambda value: (-len(value), value))


@functools.cache
def _generated() -> tuple[dict[str, str], ...]:
    out = []
    for template in TEMPLATES:
        siblings = [t for t in TEMPLATES if t.kind == template.kind and t is not template]
        for value in values(template.kind):
            sql = template.sql.format(v=value)
            rows = company_db.execute(sql)
            if not rows or rows == [(None,)]:
                continue
            ordered = company_db.is_ordered(sql)
            misses = [
                s.sql.format(v=value)
                for s in siblings
                if not company_db.same_result(
                    company_db.execute(s.sql.format(v=value)), rows, ordered=ordered
                )
            ]
            out.append(
                {
                    "id": f"{template.id}/{value}",
                    "template": template.id,
                    "question": template.question.format(v=value),
                    "sql": sql,
                    "wrong": misses[0],
                }
            )
    return tuple(out)


def generated() -> list[dict[str, str]]:
    """Every template filled with every value of its kind: dicts with ``id``
    (``template/value``), ``template``, ``question``, gold ``sql`` and ``wrong`` (a near
    miss)."""
    return [dict(question) for question in _generated()]


def drills(*, per_template: int = 6, seed: int = 0) -> list[dict[str, str]]:
    """``per_template`` questions for each template, each about a name of another kind, drawn
    with ``seed``: dicts as :func:`generated` makes (ids ``drill:template/value``), the near
    miss the kind's first sibling. Their queries find nothing (or count zero); they are for
    the warm-up's teacher only, never scored."""
    rng = random.Random(seed)
    every = set(values())
    out: list[dict[str, str]] = []
    for template in TEMPLATES:
        default = next(t for t in TEMPLATES if t.kind == template.kind and t is not template)
        others = sorted(every - set(values(template.kind)))
        out.extend(
            {
                "id": f"drill:{template.id}/{value}",
                "template": template.id,
                "question": template.question.format(v=value),
                "sql": template.sql.format(v=value),
                "wrong": default.sql.format(v=value),
            }
            for value in rng.sample(others, per_template)
        )
    return out


def split(
    questions: Sequence[dict[str, str]] | None = None, *, seed: int = 0, held_out: float = 0.25
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """``(train, val)``: ``held_out`` of each template's questions (at least one), drawn with
    ``seed``, go to ``val``."""
    questions = generated() if questions is None else questions
    rng = random.Random(seed)
    train: list[dict[str, str]] = []
    val: list[dict[str, str]] = []
    for template in TEMPLATES:
        mine = [q for q in questions if q["template"] == template.id]
        count = max(1, round(held_out * len(mine))) if mine else 0
        picked = set(rng.sample(range(len(mine)), count))
        for i, question in enumerate(mine):
            (val if i in picked else train).append(question)
    return train, val
