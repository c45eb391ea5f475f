//! `vmscale list`: scenarios, their knobs and defaults.

use crate::console::outln;
use crate::failure::Failure;

pub fn list() -> Result<(), Failure> {
    for scenario in vmscale_scenario::catalogue() {
        outln!("{}  ({})", scenario.name, scenario.case)?;
        outln!("    {}", scenario.summary)?;
        outln!("    sweeps: {}", scenario.sweep)?;
        for knob in &scenario.knobs {
            let range = knob
                .range
                .map(|r| format!(" ({} to {})", r.min, r.max))
                .unwrap_or_default();
            outln!(
                "    {:<14} {:<16} {}{range}",
                knob.flag,
                format!("[{}]", knob.default),
                knob.help
            )?;
        }
        outln!("    run: vmscale run {} [knobs]", scenario.name)?;
    }
    Ok(())
}
