"""The operator's page of `dockhand serve` in a real browser (Debian's
chromium, driven by selenium): it refuses a wrong key, lists a sandbox the
E2B SDK made with the command it ran, and kills it from its button. Prints
one JSON line."""

import json
import os
import time

from e2b import Sandbox
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

URL = os.environ["E2B_API_URL"]
KEY = os.environ["E2B_API_KEY"]


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def log_in(driver, wait, key):
    field = wait.until(seen.visibility_of_element_located((By.ID, "key")))
    field.clear()
    field.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()


def main():
    kept = Sandbox.create(template="base", timeout=300, metadata={"who": "kept"})
    doomed = Sandbox.create(template="base", timeout=300, metadata={"who": "doomed"})
    doomed.commands.run("echo dashboard-check")
    driver = browser()
    wait = WebDriverWait(driver, 30)
    out = {}
    try:
        driver.get(URL + "/dashboard")
        out["title"] = driver.title
        log_in(driver, wait, "not-a-key-of-this-server")
        error = wait.until(
            lambda d: d.find_element(By.ID, "login-error").text or None
        )
        out["wrong_key"] = error
        log_in(driver, wait, KEY)
        row = f'tr[data-sandbox="{doomed.sandbox_id}"]'
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, row)))
        found = driver.find_element(By.CSS_SELECTOR, row)
        out["listed"] = sorted(
            e.get_attribute("data-sandbox")
            for e in driver.find_elements(By.CSS_SELECTOR, "tr[data-sandbox]")
        )
        out["row_text"] = found.text
        found.find_element(By.TAG_NAME, "summary").click()
        out["commands"] = found.find_element(By.CSS_SELECTOR, "ol.commands").text
        found.find_element(By.CSS_SELECTOR, "button.kill").click()
        wait.until(seen.invisibility_of_element_located((By.CSS_SELECTOR, row)))
        # It stays gone across the live refreshes.
        time.sleep(2.5)
        out["listed_after"] = sorted(
            e.get_attribute("data-sandbox")
            for e in driver.find_elements(By.CSS_SELECTOR, "tr[data-sandbox]")
        )
        out["console_errors"] = [
            entry["message"]
            for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE" and "401" not in entry["message"]
        ]
    finally:
        driver.quit()
    out["kept"] = kept.sandbox_id
    out["doomed"] = doomed.sandbox_id
    out["doomed_running"] = doomed.is_running()
    out["api_listed"] = sorted(s.sandbox_id for s in Sandbox.list().next_items())
    kept.kill()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
