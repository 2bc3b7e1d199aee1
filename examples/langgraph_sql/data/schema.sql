-- A small company: its departments and employees, its customers, products and orders.
CREATE TABLE departments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT NOT NULL,
    budget INTEGER NOT NULL  -- yearly, in euros
);
CREATE TABLE employees (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    department_id INTEGER NOT NULL REFERENCES departments (id),
    title TEXT NOT NULL,
    salary INTEGER NOT NULL,  -- yearly, in euros
    hire_date TEXT NOT NULL,  -- YYYY-MM-DD
    manager_id INTEGER REFERENCES employees (id)  -- NULL for heads of department
);
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT NOT NULL
);
CREATE TABLE products (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    category TEXT NOT NULL,  -- Hardware, Accessories or Software
    price REAL NOT NULL  -- in euros
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    product_id INTEGER NOT NULL REFERENCES products (id),
    employee_id INTEGER NOT NULL REFERENCES employees (id),  -- the salesperson
    quantity INTEGER NOT NULL,
    order_date TEXT NOT NULL  -- YYYY-MM-DD
);
